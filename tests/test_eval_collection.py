"""Evaluating your own folder end to end, outside the repository: a hand-written eval set on the
collection, `chunkyard index` prints the loader's notes, `chunkyard eval --collection` uses the
collection's eval_set and folder and prints and records the notes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import STATE_VARIABLES

CLI = [sys.executable, "-m", "orchestration.cli"]


@pytest.mark.slow
def test_eval_collection_uses_its_eval_set_and_folder_and_reports_the_notes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "birds.md").write_text(
        "# Birds\n\nThe heron waits by the pond.\n\nThe heron waits.\n\nSwallows fly south in autumn.\n"
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
    # progress inside the embeddings step: counts, rate, time left
    assert re.search(r"embeddings: \d+/\d+ chunks embedded, \S+/\S+, \S+ left", indexed.stdout), (
        indexed.stdout
    )
    assert "note: mine/recursive-256:" in indexed.stdout and "found 2 times" in indexed.stdout, indexed.stdout

    evaluated = run("eval", "--collection", "mine", "--mode", "bm25")
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    assert "dataset note:" in evaluated.stderr and "found 2 times" in evaluated.stderr, evaluated.stderr
    board = json.loads((project / ".chunkyard" / "reports" / "mine" / "eval_full.json").read_text())
    assert board["notes"][0].startswith("Dataset loader: 1 note(s)")  # each report records them
    assert not (project / "benchmarks").exists()
