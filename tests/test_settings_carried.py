"""`chunkyard index` reads and checks its settings once, in the command's process; the child that runs
the index gets the checked project through a pipe and neither parses a settings file nor checks again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.cli_helpers import STATE_VARIABLES
from tests.test_config_checks import COLLECTION, INDEX

# Loaded by every Python process of the command (PYTHONPATH): counts, per process, each settings file
# the real parser reads and each index config the real check checks, in a JSON Lines file.
COUNTER = """\
import json, os

from chunkyard.retrieval.settings import config_checks, project

_parse, _check = project._parse_yaml, config_checks.index_config_problems


def _note(kind, what):
    role = "child" if os.environ.get("CHUNKYARD_RUN_SESSION") else "parent"
    with open(os.environ["COUNTS_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"pid": os.getpid(), "role": role, "kind": kind, "what": what}) + "\\n")


def _counted_parse(path):
    _note("parse", path.name)
    return _parse(path)


def _counted_check(config, *args, **kwargs):
    _note("check", config.name)
    return _check(config, *args, **kwargs)


project._parse_yaml = _counted_parse
config_checks.index_config_problems = _counted_check
"""


def _settled_project(root: Path) -> Path:
    """A one-document project whose chunkyard.yaml changed over a second ago (so each process may
    reuse its own parse of an unchanged file, `project.SETTLED_S`)."""
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("# Apples\n\nApples grow on trees in orchards.\n")
    (root / "chunkyard.yaml").write_text(COLLECTION + INDEX)
    past = time.time() - 60
    os.utime(root / "chunkyard.yaml", (past, past))
    time.sleep(1.1)
    return root


def _command(project: Path, hook: Path, counts: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}
    env.update(PYTHONPATH=str(hook), COUNTS_FILE=str(counts))
    return subprocess.run(
        [sys.executable, "-m", "chunkyard.orchestration.cli", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _counts(counts: Path) -> Counter:
    rows = [json.loads(line) for line in counts.read_text().splitlines()] if counts.exists() else []
    return Counter((row["role"], row["kind"], row["what"]) for row in rows)


@pytest.fixture
def hook(tmp_path: Path) -> Path:
    folder = tmp_path / "hook"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(COUNTER)
    return folder


@pytest.mark.slow
def test_index_parses_each_settings_file_once_and_the_child_checks_nothing(
    tmp_path: Path, hook: Path
) -> None:
    project = _settled_project(tmp_path / "proj")
    counts = tmp_path / "counts.jsonl"
    done = _command(project, hook, counts, "index")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "succeeded" in done.stdout and "Documents: 1 added" in done.stdout, done.stdout
    seen = _counts(counts)
    parses = {(role, what): n for (role, kind, what), n in seen.items() if kind == "parse"}
    # the project file and the bundled indexes.yaml and collections.yaml: each parsed once, by the parent
    assert parses == {
        ("parent", "chunkyard.yaml"): 1,
        ("parent", "indexes.yaml"): 1,
        ("parent", "collections.yaml"): 1,
    }, seen
    checks = {(role, what): n for (role, kind, what), n in seen.items() if kind == "check"}
    assert checks.get(("parent", "mine-64")) == 1, seen  # the config indexed, checked once
    assert not [key for key in checks if key[0] == "child"], seen  # the child builds from the carried check


def test_a_bad_setting_stops_index_in_the_parent_before_any_child_starts(tmp_path: Path, hook: Path) -> None:
    project = _settled_project(tmp_path / "proj")
    (project / "chunkyard.yaml").write_text((COLLECTION + INDEX).replace("size: 64", "size: -5"))
    counts = tmp_path / "counts.jsonl"
    done = _command(project, hook, counts, "index")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("chunker.size: must be >= 8, got -5") == 1, done.stderr
    assert {role for role, _kind, _what in _counts(counts)} == {"parent"}  # no child was started
    assert not (project / ".chunkyard").exists()


def test_the_child_reads_what_was_carried_once_and_nothing_without_a_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pickle

    from chunkyard.orchestration.cli_session import CARRIED_ENV, carried_from_parent

    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(pickle.dumps({"checked": ["mine"]}))
    monkeypatch.setenv(CARRIED_ENV, str(read_end))
    assert carried_from_parent() == {"checked": ["mine"]}
    assert CARRIED_ENV not in os.environ  # not passed on to the run's own processes
    assert carried_from_parent() is None  # read once
    with pytest.raises(OSError):
        os.fstat(read_end)  # and its pipe closed
    for stale in ("not a descriptor", "999999"):  # set by hand, or inherited from elsewhere
        monkeypatch.setenv(CARRIED_ENV, stale)
        assert carried_from_parent() is None
