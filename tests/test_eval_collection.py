"""A newcomer's walk-through from an empty folder outside the repository: `init`, `add`, a hand-written
eval set on the collection, `index` (progress inside every step, the loader's notes, a named run),
`search --json`, `eval --collection` (its eval_set and folder, the notes printed and recorded, plain
progress lines in a log), then a one-sentence edit whose counts say what was re-chunked and embedded."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli_helpers import CLI, STATE_VARIABLES


@pytest.mark.slow
def test_eval_collection_uses_its_eval_set_and_folder_and_reports_the_notes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    filler = "".join(  # long enough for several chunks: an edit re-chunks them all, embeds one
        f"\n\nThe {bird} nests in the {place}, lays {n} eggs and sings at dawn; its feathers are "
        f"{colour}, its call is short, and it feeds on seeds, insects and berries all summer long."
        for n, (bird, place, colour) in enumerate(
            [
                (b, p, c)
                for b in ("wren", "robin", "finch", "lark", "thrush")
                for p, c in (("reeds", "brown"), ("hedge", "grey"), ("oak", "olive"))
            ],
            start=2,
        )
    )
    (docs / "birds.md").write_text(
        "# Birds\n\nThe heron waits by the pond.\n\nThe heron waits.\n\nSwallows fly south in autumn."
        + filler
        + "\n"
    )
    (docs / "tools.md").write_text("# Tools\n\nA chisel cuts wood along the grain.\n")
    project = tmp_path / "proj"
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}

    def run(*argv: str, cwd: Path = project) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)

    assert run("init", str(project), cwd=tmp_path).returncode == 0
    assert run("add", "mine", str(docs)).returncode == 0
    (project / "evals").mkdir()
    questions = [
        {
            "id": "q1",
            "question": "Where do swallows go in autumn?",
            "references": [{"doc": "birds.md", "text": "Swallows fly south"}],
        },
        {
            "id": "q2",
            "question": "What cuts wood?",
            "references": [{"doc": "tools.md", "text": "A chisel cuts wood"}],
        },
        {
            "id": "q3",
            "question": "Who waits?",
            "references": [{"doc": "birds.md", "text": "The heron waits"}],
        },
    ]
    (project / "evals" / "mine.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    text = (project / "chunkyard.yaml").read_text()
    (project / "chunkyard.yaml").write_text(
        text.replace("    indexes:", "    eval_set: evals/mine.jsonl\n    indexes:")
    )

    indexed = run("index")
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    # progress inside every step that can take long: counts, rate, time left (tqdm's meter)
    for step, meter in [
        ("chunks", r"\d+/\d+ documents chunked"),
        ("embeddings", r"\d+/\d+ chunks embedded"),
        ("bm25", r"\d+/\d+ chunks analysed"),
        ("publish", r"3/3 phases published"),
        ("evaluation", r"\d+/\d+ variants evaluated"),
    ]:
        line = rf"mine__recursive_256__{step}: {meter}, \S+/\S+, \S+ left"
        assert re.search(line, indexed.stdout), (line, indexed.stdout)
    line = r"mine__documents: \d+/\d+ files read, \S+/\S+, \S+ left"  # the folder's files, listed first
    assert re.search(line, indexed.stdout), (line, indexed.stdout)
    assert "of job index_mine succeeded" in indexed.stdout, indexed.stdout  # not __ephemeral_asset_job__
    assert "note: mine/recursive-256:" in indexed.stdout and "found 2 times" in indexed.stdout, indexed.stdout

    found = run("search", "where do swallows go", "-k", "1", "--json")
    assert found.returncode == 0, found.stderr
    answer = json.loads(found.stdout)
    assert answer["index"] == "mine/recursive-256" and answer["results"][0]["doc_id"] == "birds.md"

    evaluated = run("eval", "--collection", "mine", "--mode", "bm25")
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    # stderr is a pipe here, as in a log: plain progress lines, no carriage returns or escape codes
    assert "chunkyard eval: recursive-256: evaluating bm25" in evaluated.stderr, evaluated.stderr
    assert "\r" not in evaluated.stderr and "\x1b" not in evaluated.stderr, repr(evaluated.stderr)
    assert "dataset note:" in evaluated.stderr and "found 2 times" in evaluated.stderr, evaluated.stderr
    board = json.loads((project / ".chunkyard" / "reports" / "mine" / "eval_full.json").read_text())
    assert board["notes"][0].startswith("Dataset loader: 1 note(s)")  # each report records them
    assert not (project / "benchmarks").exists()

    # one sentence edited: its document is re-chunked whole, but only the new text is embedded; the
    # question whose answer text it removed is dropped with a note, not silently
    birds = docs / "birds.md"
    birds.write_text(
        birds.read_text().replace("Swallows fly south in autumn.", "Swifts fly south in autumn.")
    )
    again = run("index")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 question(s) skipped" in again.stdout and "q1" in again.stdout, again.stdout
    chunks = re.search(
        r"Chunks \(1 config\): (\d+) re-chunked from 1 document added or changed since the last publish",
        again.stdout,
    )
    embedded = re.search(r"Embeddings: (\d+) computed for new text, (\d+) reused", again.stdout)
    assert chunks and embedded, again.stdout
    assert 1 <= int(embedded[1]) < int(chunks[1]), again.stdout  # several chunks, one new text
