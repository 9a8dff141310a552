"""A run killed mid-step must not hold the `embedding` pool: the sweep fails it and frees its slot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SLOW_JOB = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from dagster import DagsterInstance, asset, materialize
    from assets.runs import host_tags

    marker = Path(sys.argv[1])

    @asset(pool="embedding")
    def slow_embeddings() -> None:
        marker.write_text("started")
        time.sleep(600)

    materialize([slow_embeddings], instance=DagsterInstance.get(), tags=host_tags())
    """
)


def _quick_embeddings():
    from dagster import asset

    @asset(pool="embedding", name="quick_embeddings")
    def quick() -> int:
        return 1

    return quick


@pytest.fixture()
def instance_home(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from orchestration.instance import ensure_instance

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return ensure_instance(pg_url)


def test_kill_9_mid_step_then_sweep_frees_the_pool_and_a_rerun_finishes(instance_home, tmp_path) -> None:
    from dagster import DagsterInstance, DagsterRunStatus, materialize

    from assets.runs import host_tags, sweep_dead_runs

    marker = tmp_path / "started"
    script = tmp_path / "slow_job.py"
    script.write_text(SLOW_JOB)
    env = {**os.environ, "DAGSTER_HOME": str(instance_home), "PYTHONPATH": str(REPO_ROOT)}
    worker = subprocess.Popen([sys.executable, str(script), str(marker)], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert worker.poll() is None, "the slow run exited before its step started"
            assert time.monotonic() < deadline, "the slow run's step never started"
            time.sleep(0.2)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()

    instance = DagsterInstance.get()
    (dead,) = [r for r in instance.get_runs() if r.status == DagsterRunStatus.STARTED]
    held = instance.event_log_storage.get_concurrency_info("embedding")
    assert held.active_slot_count == 1, "the killed run should still hold the pool slot"

    assert sweep_dead_runs(instance) == [dead.run_id]
    assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
    assert instance.event_log_storage.get_concurrency_info("embedding").active_slot_count == 0
    assert sweep_dead_runs(instance) == []  # idempotent

    rerun = materialize([_quick_embeddings()], instance=instance, tags=host_tags())
    assert rerun.success


def test_the_sweep_leaves_live_runs_and_other_hosts_alone(instance_home) -> None:
    """A run of another host is never judged by a pid looked up here; a live run is kept."""
    from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

    from assets.runs import RUN_HOST_TAG, host_tags, sweep_dead_runs

    instance = DagsterInstance.get()
    run = instance.add_run(
        DagsterRun(
            job_name="elsewhere",
            run_id="f" * 32,
            status=DagsterRunStatus.STARTED,
            tags={RUN_HOST_TAG: "another-host"},
        )
    )
    mine = instance.add_run(
        DagsterRun(job_name="here", run_id="e" * 32, status=DagsterRunStatus.STARTED, tags=host_tags())
    )
    assert sweep_dead_runs(instance) == []  # `mine` has no RUN_START pid: not judged
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.STARTED
    assert instance.get_run_by_id(mine.run_id).status == DagsterRunStatus.STARTED
