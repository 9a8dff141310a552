"""A typo in any config field stops `chunkyard index` before anything runs: exit 2, one line per problem
with `file:line`, the field and the allowed values; `chunkyard check` and `index --dry-run` show the plan."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.orchestration.cli import main
from chunkyard.retrieval.settings.config_checks import SettingsErrors, load_index_specs

from tests.cli_helpers import STATE_VARIABLES

COLLECTION = """\
collections:
  mine:
    folders: [docs]
    indexes: [mine-64]
"""
INDEX = """\
indexes:
  mine-64:
    chunker:
      strategy: recursive
      size: 64
      overlap: 0
      tokenizer: words
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with one folder of one document, no state named by the environment."""
    for name in STATE_VARIABLES:  # set, then removed: restored after the test (main() sets CHUNKYARD_PROJECT)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nSome text.\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# (what to change in COLLECTION + INDEX, the text of the offending line, what the error says)
TYPOS = [
    (
        "strategy: recursive",
        "strategy: recursiv",
        "chunker.strategy: unknown 'recursiv'; expected one of token",
    ),
    ("size: 64", "size: -5", "chunker.size: must be >= 8, got -5"),
    (
        "tokenizer: words",
        "tokenizer: word",
        "chunker.tokenizer: unknown 'word'; expected one of model, cl100k",
    ),
    ("overlap: 0", "overlap: 64", "chunker.overlap: must be >= 0 and < size (64), got 64"),
    ("overlap: 0", "sise: 64", "chunker.sise: not a field of strategy 'recursive'; allowed:"),
    (
        "indexes: [mine-64]",
        "indexes: mine-64",
        "collections.mine.indexes: expected a list of index config names, got the string 'mine-64'",
    ),
    ("indexes: [mine-64]", "indexes: [mine-46]", "unknown index config 'mine-46'; known:"),
    ("folders: [docs]", "folders: [dosc]", "collections.mine.folders: "),
    ("folders: [docs]", "folders: docs", "collections.mine.folders: expected a list of folders"),
    (
        "indexes: [mine-64]",
        "indexes: [mine-64]\n    include: '*.md'",
        "collections.mine.include: expected a list",
    ),
    (
        "indexes: [mine-64]",
        "indexes: [mine-64]\n    eval_set: evals/mine.jsonl",
        "collections.mine.eval_set: ",
    ),
    (
        "indexes: [mine-64]",
        "indexes: [mine-64]\n    allow_empty: yes please",
        "allow_empty: must be true or false",
    ),
    ("indexes: [mine-64]", "indexes: [mine-64]\n    folder: [docs]", "unknown field(s) ['folder']; allowed"),
    (
        "      tokenizer: words",
        "      tokenizer: words\n    embedder: {backend: onx}",
        "embedder.backend: unknown 'onx'",
    ),
    (
        "      tokenizer: words",
        "      tokenizer: words\n    embedder: {batch: 8}",
        "embedder: unknown option(s) ['batch']; allowed",
    ),
    (
        "      tokenizer: words",
        "      tokenizer: words\n    hybrid: {weight: 3}",
        "hybrid.weight: must be a number",
    ),
    ("      tokenizer: words", "      tokenizer: words\n    bm25: {k1: -1}", "bm25"),
    (
        "      tokenizer: words",
        "      tokenizer: words\n    embedding_model: all-MiniLM-L6-v3",
        "embedding_model: embedding model 'all-MiniLM-L6-v3' is not available locally",
    ),
    (
        "      tokenizer: words",
        "      tokenizer: words\n    allow_truncation: 1",
        "allow_truncation: must be true",
    ),
]


@pytest.mark.parametrize(("before", "after", "message"), TYPOS, ids=[t[1].split("\n")[-1] for t in TYPOS])
def test_a_typo_in_any_field_stops_index_with_file_line_and_allowed_values(
    project: Path, capsys: pytest.CaptureFixture[str], before: str, after: str, message: str
) -> None:
    text = (COLLECTION + INDEX).replace(before, after, 1)
    assert text != COLLECTION + INDEX
    (project / "chunkyard.yaml").write_text(text)
    line = [row.strip() for row in text.splitlines()].index(after.splitlines()[-1].strip()) + 1
    assert main(["index"]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    problem = next(row for row in err.splitlines() if message in row)
    assert f"chunkyard.yaml:{line}:" in problem, (line, err)
    assert not (project / ".chunkyard").exists()  # refused before anything ran: no database, no Dagster
    assert main(["check"]) == 2


def test_all_problems_are_listed_at_once_and_check_shows_the_plan(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        (COLLECTION + INDEX)
        .replace("size: 64", "size: -5")
        .replace("folders: [docs]", "folders: [docs, gone]")
    )
    (project / "chunkyard.yaml").write_text(text)
    assert main(["check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "chunkyard check: 2 configuration problem(s), nothing was run:"
    assert "chunker.size" in err[1] and "gone does not exist" in err[2] and "allow_empty: true" in err[2]

    # allowed to be empty: the missing folder is no longer an error, and the plan says so
    (project / "chunkyard.yaml").write_text(
        text.replace("size: -5", "size: 64").replace("folders:", "allow_empty: true\n    folders:")
    )
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "Configuration OK" in out and "gone (missing: indexed as empty)" in out
    assert "mine/mine-64: recursive chunks of up to 64 words tokens" in out
    assert main(["index", "--dry-run"]) == 0
    assert capsys.readouterr().out == out
    assert not (project / ".chunkyard").exists()


def test_the_dagster_definitions_refuse_a_bad_chunker_too(tmp_path: Path) -> None:
    indexes = tmp_path / "indexes.yaml"
    indexes.write_text(INDEX.replace("tokenizer: words", "tokenizer: word"))
    collections = tmp_path / "collections.yaml"
    collections.write_text(COLLECTION.replace("[docs]", f"[{tmp_path}]"))
    with pytest.raises(
        SettingsErrors, match=r"indexes.yaml:7: indexes.mine-64.chunker.tokenizer: unknown 'word'"
    ):
        load_index_specs(indexes, collections)


@pytest.mark.slow
def test_a_failed_check_fails_index_and_stays_failed_on_an_unchanged_rerun(tmp_path: Path) -> None:
    """250 words of long words are ~3 word pieces each: far over all-MiniLM-L6-v2's 256-token input."""
    import subprocess
    import sys

    project = tmp_path / "proj"
    (project / "docs").mkdir(parents=True)
    words = " ".join(f"antidisestablishmentarianism{i}" for i in range(400))
    (project / "docs" / "long.md").write_text(f"# Long\n\n{words}\n")
    (project / "chunkyard.yaml").write_text(
        COLLECTION.replace("mine-64", "words-250")
        + "indexes:\n  words-250:\n    chunker: {strategy: recursive, size: 250, overlap: 0, tokenizer: words}\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in STATE_VARIABLES}
    for attempt in ("first", "unchanged"):
        done = subprocess.run(
            [sys.executable, "-m", "chunkyard.orchestration.cli", "index"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 1, (attempt, done.stdout, done.stderr)
        failed = [
            line for line in done.stdout.splitlines() if "check within_model_token_limit failed" in line
        ]
        assert len(failed) == 1 and "mine/words_250/chunks" in failed[0], done.stdout
        assert "chunks_over_limit=" in failed[0] and "model_token_limit=256" in failed[0]
        assert "chunks_checked=0" not in failed[0]  # the unchanged run checks the published chunks
        assert "FAILED" in done.stdout and "succeeded" not in done.stdout
        err = done.stderr.strip().splitlines()[-2:]  # (the first run's ONNX export talks before)
        assert (
            err[0]
            == "chunkyard index: 1 check(s) failed, first within_model_token_limit on mine/words_250/chunks"
        )
        assert err[1].startswith("hint: chunks longer than the embedding model's input")
