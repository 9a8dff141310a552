"""One writer per collection for `chunkyard index`: a second run of the collection waits for the first
(or refuses with --no-wait), whether the first is another `chunkyard index` or a run of the instance."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from chunkyard.orchestration.cli_session import SESSION_ENV
from chunkyard.orchestration.index_writers import WriterBusy, run_tags, sole_writer
from dagster import DagsterInstance, asset, materialize

from tests.conftest import REPO_ROOT

CLI = [sys.executable, "-m", "chunkyard.orchestration.cli"]
STATE_VARIABLES = ("CHUNKYARD_PROJECT", "CHUNKYARD_HOME", "CHUNKYARD_CONFIGS", "DATABASE_URL", "DAGSTER_HOME")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}
    return {**env, "PYTHONPATH": str(REPO_ROOT)}


def _cli(argv: list[str], cwd: Path, *, in_place: bool = False, **kwargs) -> subprocess.Popen[str]:
    """`chunkyard ARGV`; `in_place` runs the command in this process rather than in the child session it
    starts for Ctrl-C (orchestration.cli_session), so a SIGSTOP to the process holds the run itself."""
    return subprocess.Popen(
        [*CLI, *argv],
        cwd=cwd,
        env={**_env(), SESSION_ENV: "1"} if in_place else _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


class Output:
    """A running command's output, read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for(self, prefix: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines):
            assert time.monotonic() < deadline and self.process.poll() is None, "".join(self.lines)
            time.sleep(0.2)

    def finish(self, timeout: float = 900) -> str:
        self.process.wait(timeout=timeout)
        self._reader.join(30)
        return "".join(self.lines)


def test_two_overlapping_cli_runs_of_one_collection_run_one_after_the_other(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(30):
        (docs / f"note{i}.md").write_text(f"# Note {i}\n\nThe harbour pilot {i} reads tide tables.\n" * 20)
    project = tmp_path / "work"
    project.mkdir()
    for argv in (["init"], ["add", "notes", str(docs)]):
        assert subprocess.run([*CLI, *argv], cwd=project, env=_env(), timeout=120).returncode == 0
    assert _cli(["index"], project).wait(timeout=900) == 0  # the database and the instance exist now

    (docs / "note0.md").write_text("# Note 0\n\nThe secret animal is AARDVARK.\n")
    first = Output(_cli(["index"], project, in_place=True))
    first.wait_for("Indexing notes")  # it holds the collection and its run has started
    os.kill(first.process.pid, signal.SIGSTOP)  # held mid-run, however fast this machine is
    try:
        refused = subprocess.run(
            [*CLI, "index", "--no-wait"], cwd=project, env=_env(), capture_output=True, text=True, timeout=300
        )
        (docs / "note0.md").write_text("# Note 0\n\nThe secret animal is BUFFALOS.\n")
        second = Output(_cli(["index"], project))
        second.wait_for("Waiting for another `chunkyard index` of notes")
    finally:
        os.kill(first.process.pid, signal.SIGCONT)
    first_out, second_out = first.finish(), second.finish()

    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "notes" in refused.stderr and "not started" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert first.process.returncode == 0 and second.process.returncode == 0, first_out + second_out
    for out in (first_out, second_out):
        assert "taken over" not in out and "succeeded" in out, out
    found = subprocess.run(
        [*CLI, "search", "secret animal BUFFALOS", "-k", "1", "--mode", "bm25"],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0 and "note0.md" in found.stdout, found.stdout + found.stderr


def test_a_run_of_the_instance_in_flight_is_waited_for_or_refused(pg_url: str, tmp_path: Path) -> None:
    """A real in-flight run tagged with the collection (as the daemon's are) holds the CLI back."""
    release = threading.Event()
    started = threading.Event()

    @asset(name="held")
    def held() -> int:
        started.set()
        release.wait(120)
        return 1

    instance = DagsterInstance.ephemeral(tempdir=str(tmp_path))
    runner = threading.Thread(
        target=lambda: materialize([held], instance=instance, tags=run_tags(["notes"])), daemon=True
    )
    runner.start()
    assert started.wait(120)
    prefixes = {"notes": "notes"}
    with pytest.raises(WriterBusy, match="notes: run "), sole_writer(instance, pg_url, prefixes, wait=False):
        pass
    said: list[str] = []
    entered: list[float] = []

    def second() -> None:
        with sole_writer(instance, pg_url, prefixes, wait=True, say=said.append):
            entered.append(time.monotonic())

    waiter = threading.Thread(target=second, daemon=True)
    waiter.start()
    time.sleep(3)
    assert not entered and said and "Waiting for the run in progress" in said[0]
    released = time.monotonic()
    release.set()
    runner.join(60)
    waiter.join(60)
    assert entered and entered[0] >= released
    assert run_tags(["notes"]) == {"chunkyard/collections": "notes", "chunkyard/writer": "notes"}
    assert "chunkyard/writer" not in run_tags(["a", "b"])  # one value per tag: the lock and wait only
