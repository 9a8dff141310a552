"""The document sensor through Dagster's own daemon: real ticks, real run keys, real dedupe.

Starts `dagster-daemon run -m assets.definitions` as a process on a temporary DAGSTER_HOME
(its own Dagster schema on the test Postgres) with a one-second sensor interval, replays
A->B->A->B on one file and delete -> re-add -> delete on another, and reads the ticks and runs the
daemon recorded back from the instance. The run queue is held at zero, so the requested runs stay
QUEUED: what is tested is that each observed change became its own run (before the fix, the third
change reused the first one's run key and the daemon skipped it as already completed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.dagster_helpers import DOCS, unique_name, write_project

pytestmark = pytest.mark.slow

SENSOR = "document_update_sensor"
TICK_WAIT_SECONDS = 60


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@pytest.fixture()
def daemon_home(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A DAGSTER_HOME whose instance lives in its own schema and launches no run (queue limit 0)."""
    from chunkyard.orchestration.instance import create_dagster_schema, dagster_postgres_url, instance_config

    schema = unique_name("dagster_daemon_")
    create_dagster_schema(pg_url, schema)
    instance = instance_config(pg_url)
    instance["storage"] = {"postgres": {"postgres_url": dagster_postgres_url(pg_url, schema)}}
    instance["concurrency"]["runs"]["max_concurrent_runs"] = 0
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def _sensor_ticks(instance) -> list:
    states = [s for s in instance.all_instigator_state() if s.name == SENSOR]  # no schedule shares it
    ticks = [t for s in states for t in instance.get_ticks(s.instigator_origin_id, s.selector_id)]
    return sorted(ticks, key=lambda t: t.timestamp)


def _wait_for_tick_after(instance, moment: float, daemon: subprocess.Popen, log: Path) -> None:
    """Until a tick that started after `moment` has finished."""
    deadline = time.monotonic() + TICK_WAIT_SECONDS
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise AssertionError(f"dagster-daemon exited ({daemon.returncode}):\n{log.read_text()[-4000:]}")
        if any(t.timestamp > moment and t.status.value != "STARTED" for t in _sensor_ticks(instance)):
            return
        time.sleep(0.5)
    raise AssertionError(f"no sensor tick within {TICK_WAIT_SECONDS} s:\n{log.read_text()[-4000:]}")


def _runs(instance, collection: str) -> list:
    """The sensor's runs for this collection, in generation order."""
    from dagster import RunsFilter

    runs = instance.get_runs(
        RunsFilter(tags={"dagster/sensor_name": SENSOR, "chunkyard/collections": collection})
    )
    return sorted(runs, key=lambda r: int(r.tags["chunkyard/generation"]))


def test_daemon_runs_every_observed_change_once(daemon_home: Path, pg_url: str, tmp_path: Path) -> None:
    from chunkyard.assets.keys import collection_prefix
    from chunkyard.assets.runs import RUN_HOST_TAG, collections_in_flight, queue_daemon_alive, this_host
    from dagster import DagsterInstance, DagsterRunStatus

    collection = unique_name("d")
    docs_dir, _, _ = write_project(tmp_path, collection, configs=["recursive-48"])
    beta = docs_dir / "beta.md"
    a, b = beta.read_text(), beta.read_text() + "\nA second paragraph about daemons.\n"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(daemon_home),
        "DATABASE_URL": pg_url,
        "CHUNKYARD_CONFIGS": str(tmp_path),  # indexes.yaml and collections.yaml of the test project
        "CHUNKYARD_HOME": str(tmp_path / "home"),
        "CHUNKYARD_SENSOR_INTERVAL": "1",
        "PYTHONPATH": str(REPO_ROOT),
    }
    log = tmp_path / "daemon.log"
    daemon_bin = Path(sys.executable).parent / "dagster-daemon"
    with open(log, "wb") as out:
        daemon = subprocess.Popen(
            [str(daemon_bin), "run", "-m", "chunkyard.assets.definitions"],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    instance = DagsterInstance.get()
    steps = ["initial", "B", "A", "B", "delete", "re-add", "delete"]
    done: list[str] = []
    try:
        for step in steps:
            moment = time.time()
            if step in ("A", "B"):
                _write(beta, a if step == "A" else b)
            elif step == "delete":
                (docs_dir / "gamma.txt").unlink()
            elif step == "re-add":
                _write(docs_dir / "gamma.txt", DOCS["gamma.txt"])
            _wait_for_tick_after(instance, moment, daemon, log)
            # The tick after the change has run (or an earlier one saw it): one more run per change.
            seen = _runs(instance, collection)
            statuses = [(t.status.value, t.run_ids) for t in _sensor_ticks(instance)[-3:]]
            assert len(seen) == len(done) + 1, f"{step}: the daemon dropped the change; last ticks {statuses}"
            done.append(step)
        # while the queue's daemon beats, its queued runs hold the collection (`chunkyard index` waits)
        held = collections_in_flight(instance, {collection: collection_prefix(collection)})
        assert queue_daemon_alive(instance) and len(held.get(collection, [])) == len(steps)
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()

    runs = _runs(instance, collection)
    assert len(runs) == len(steps), [
        (r.tags.get("dagster/run_key"), r.tags.get("chunkyard/trigger")) for r in runs
    ]
    keys = [r.tags["dagster/run_key"] for r in runs]
    assert len(set(keys)) == len(keys), keys
    assert [r.tags["chunkyard/trigger"] for r in runs] == ["initial_scan"] + ["document_update"] * (
        len(steps) - 1
    )
    changes = [
        (r.tags["chunkyard/added"], r.tags["chunkyard/changed"], r.tags["chunkyard/deleted"]) for r in runs
    ]
    assert changes == [("3", "0", "0")] + [("0", "1", "0")] * 3 + [
        ("0", "0", "1"),
        ("1", "0", "0"),
        ("0", "0", "1"),
    ]
    assert all(r.tags[RUN_HOST_TAG] == this_host() for r in runs)
    assert {r.status for r in runs} == {DagsterRunStatus.QUEUED}  # the queue launched none

    # No daemon beats any more (a stack stopped with runs queued): nothing will launch them until one
    # starts again, so they do not hold the collection; they stay queued, and then wait behind the
    # CLI's run by the writer tag's limit.
    instance.wipe_daemon_heartbeats()
    assert not queue_daemon_alive(instance)
    assert collections_in_flight(instance, {collection: collection_prefix(collection)}) == {}
    assert {r.status for r in _runs(instance, collection)} == {DagsterRunStatus.QUEUED}
