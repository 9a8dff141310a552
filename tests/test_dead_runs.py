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
    from chunkyard.assets.runs import host_tags

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
    from chunkyard.orchestration.instance import ensure_instance

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return ensure_instance(pg_url)


def test_kill_9_mid_step_then_sweep_frees_the_pool_and_a_rerun_finishes(instance_home, tmp_path) -> None:
    from chunkyard.assets.runs import host_tags, sweep_dead_runs
    from dagster import DagsterInstance, DagsterRunStatus, materialize

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
    from chunkyard.assets.runs import RUN_HOST_TAG, host_tags, sweep_dead_runs
    from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

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


MULTIPROCESS_JOB = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from dagster import DagsterInstance, Definitions, asset, define_asset_job, execute_job, reconstructable
    from chunkyard.assets.executors import build_executor
    from chunkyard.assets.runs import host_tags

    @asset
    def slow_step() -> None:
        Path(os.environ["STEP_MARKER"]).write_text(str(os.getpid()))
        time.sleep(600)

    def job():
        slow_job = define_asset_job("slow_job", selection=[slow_step])
        defs = Definitions(assets=[slow_step], jobs=[slow_job], executor=build_executor())
        return defs.resolve_job_def("slow_job")

    if __name__ == "__main__":
        execute_job(reconstructable(job), instance=DagsterInstance.get(), tags=host_tags())
    """
)


def test_a_killed_multiprocess_run_takes_its_step_process_with_it(instance_home, tmp_path) -> None:
    """SIGKILL to the run's process: its step process (a multiprocessing child) dies too, instead of
    running on as an orphan that records materialisations and holds pool slots for a failed run."""
    import psutil

    marker = tmp_path / "step.pid"
    script = tmp_path / "multiprocess_job.py"
    script.write_text(MULTIPROCESS_JOB)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(instance_home),
        "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{tmp_path}",
        "STEP_MARKER": str(marker),
    }
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, str(script)], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    step_pid = None
    try:
        deadline = time.monotonic() + 180
        while not (marker.exists() and marker.read_text()):
            assert worker.poll() is None, f"the run exited before its step started: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.2)
        step_pid = int(marker.read_text())
        assert step_pid != worker.pid and psutil.Process(step_pid).ppid() == worker.pid
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _running(step_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(step_pid), "the step process outlived its run's process"
        from chunkyard.assets.runs import sweep_dead_runs
        from dagster import DagsterInstance

        instance = DagsterInstance.get()
        swept = [instance.get_run_by_id(run_id).job_name for run_id in sweep_dead_runs(instance)]
        assert "slow_job" in swept  # the killed run, failed now
    finally:
        if worker.poll() is None:
            worker.kill()
        if step_pid is not None and _running(step_pid):
            os.kill(step_pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_sweep_kills_a_step_process_its_dead_run_left(instance_home) -> None:
    """A step process still alive after its run's process died (its STEP_START pid) is killed by the sweep."""
    import uuid

    from chunkyard.assets.runs import host_tags, sweep_dead_runs
    from dagster import DagsterEvent, DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus

    instance = DagsterInstance.get()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    step = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = instance.add_run(
            DagsterRun(
                job_name="dead", run_id=uuid.uuid4().hex, status=DagsterRunStatus.STARTED, tags=host_tags()
            )
        )
        instance.report_dagster_event(
            DagsterEvent(DagsterEventType.RUN_START.value, job_name="dead", pid=gone.pid), run.run_id
        )
        instance.report_dagster_event(
            DagsterEvent(
                DagsterEventType.STEP_START.value, job_name="dead", step_key="embeddings", pid=step.pid
            ),
            run.run_id,
        )
        assert run.run_id in sweep_dead_runs(instance)  # (with any dead run an earlier test left)
        assert step.wait(timeout=30) == -signal.SIGKILL
    finally:
        if step.poll() is None:
            step.kill()


def test_a_starting_run_whose_launch_died_is_failed_after_the_grace(instance_home) -> None:
    """The daemon died mid-launch: no worker ever reports a pid, so the run would stay STARTING until run
    monitoring's start timeout (180 s + its poll), and the change behind it with it."""
    import uuid

    from chunkyard.assets.runs import host_tags, sweep_dead_runs
    from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

    instance = DagsterInstance.get()

    def starting(pid: int | None = None) -> str:
        run = instance.add_run(
            DagsterRun(
                job_name="launch", run_id=uuid.uuid4().hex, status=DagsterRunStatus.STARTING, tags=host_tags()
            )
        )
        if pid is not None:  # what a live worker reports before it loads the code
            instance.report_engine_event(f"Started process for run (pid: {pid}).", run)
        return run.run_id

    never_launched, alive = starting(), starting(os.getpid())
    assert never_launched not in sweep_dead_runs(instance)  # within the grace: it may still start
    swept = sweep_dead_runs(instance, launch_grace=0)
    assert never_launched in swept and alive not in swept
    assert instance.get_run_by_id(never_launched).status == DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive).status == DagsterRunStatus.STARTING


def test_a_starting_stack_fails_the_runs_its_predecessor_left_and_spares_live_ones(instance_home) -> None:
    """`chunkyard instance` under `stack up`: a run left STARTING by a stopped stack is failed at once (its
    change is retried now, not after the 180 s start timeout); a run whose process lives is left alone."""
    import uuid

    from chunkyard.assets.runs import fail_runs_of_a_gone_stack, host_tags
    from dagster import DagsterEvent, DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus

    instance = DagsterInstance.get()
    left = instance.add_run(
        DagsterRun(
            job_name="left", run_id=uuid.uuid4().hex, status=DagsterRunStatus.STARTING, tags=host_tags()
        )
    )
    live = instance.add_run(
        DagsterRun(
            job_name="live", run_id=uuid.uuid4().hex, status=DagsterRunStatus.STARTED, tags=host_tags()
        )
    )
    instance.report_dagster_event(
        DagsterEvent(DagsterEventType.RUN_START.value, job_name="live", pid=os.getpid()), live.run_id
    )
    failed = fail_runs_of_a_gone_stack(instance)
    assert left.run_id in failed and live.run_id not in failed
    assert instance.get_run_by_id(left.run_id).status == DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(live.run_id).status == DagsterRunStatus.STARTED


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def _not_started(instance, tags: dict[str, str], run_id: str | None = None) -> str:
    import uuid

    from dagster import DagsterRun, DagsterRunStatus

    run = DagsterRun(
        job_name="index_notes",
        run_id=run_id or uuid.uuid4().hex,
        status=DagsterRunStatus.NOT_STARTED,
        tags=tags,
    )
    return instance.add_run(run).run_id


def test_a_not_started_run_whose_creator_died_covers_nothing_and_is_failed(instance_home) -> None:
    """What a `chunkyard index` killed between creating its run and starting it leaves: a NOT_STARTED run
    tagged with its collection. The reconciler's coverage and the CLI's wait (one judge) fail it at once
    instead of counting it in flight for ever; a NOT_STARTED run whose creator lives still counts."""
    from chunkyard.assets.reconciling import busy_collections
    from chunkyard.assets.runs import RUN_CREATOR_TAG, collections_in_flight, creator_tags
    from chunkyard.orchestration.index_writers import run_tags
    from dagster import DagsterInstance, DagsterRunStatus

    instance = DagsterInstance.get()
    dead = _not_started(
        instance, {**creator_tags(), RUN_CREATOR_TAG: f"{_dead_pid()}:1.00", **run_tags(["notes"])}
    )
    reused = _not_started(  # a live process under the dead creator's pid, started later: still dead
        instance, {**creator_tags(), RUN_CREATOR_TAG: f"{os.getpid()}:1.00", **run_tags(["notes"])}
    )
    assert busy_collections(instance, {"notes": "notes"}) == set()
    for run_id in (dead, reused):
        run = instance.get_run_by_id(run_id)
        assert run.status == DagsterRunStatus.FAILURE
    live = _not_started(instance, {**creator_tags(), **run_tags(["notes"])})  # this process created it
    assert collections_in_flight(instance, {"notes": "notes"}) == {"notes": [live]}
    assert instance.get_run_by_id(live).status == DagsterRunStatus.NOT_STARTED


def test_runs_that_can_never_start_are_failed_after_the_start_timeout(tmp_path: Path) -> None:
    """Without a creator to ask (another host's run, or one the daemon created and then died), a NOT_STARTED
    or STARTING run is failed once it is older than run monitoring's start timeout, the rule Dagster's
    daemon applies, so `chunkyard index` applies it where no daemon runs."""
    import uuid

    from chunkyard.assets.runs import RUN_HOST_TAG, sweep_dead_runs
    from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

    settings = {"run_monitoring": {"enabled": True, "start_timeout_seconds": 2}}
    with DagsterInstance.ephemeral(tempdir=str(tmp_path), settings=settings) as instance:
        elsewhere = {RUN_HOST_TAG: "another-host"}
        not_started = _not_started(instance, elsewhere)
        untagged = _not_started(instance, {})
        starting = instance.add_run(
            DagsterRun(
                job_name="j", run_id=uuid.uuid4().hex, status=DagsterRunStatus.STARTING, tags=elsewhere
            )
        ).run_id
        started = instance.add_run(
            DagsterRun(job_name="j", run_id=uuid.uuid4().hex, status=DagsterRunStatus.STARTED, tags=elsewhere)
        ).run_id
        assert sweep_dead_runs(instance) == []  # young: they may still start
        deadline = time.monotonic() + 30
        swept: list[str] = []
        while len(swept) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
            swept += sweep_dead_runs(instance)
        assert sorted(swept) == sorted([not_started, untagged, starting])
        assert instance.get_run_by_id(started).status == DagsterRunStatus.STARTED  # another host's pid


# `chunkyard index`, killed with SIGKILL right after Dagster created its run (NOT_STARTED) and before the
# run began: the exact moment, however fast the machine, by wrapping Dagster's run creation.
KILLED_AT_NOT_STARTED = textwrap.dedent(
    """
    import os, signal, sys
    from dagster import DagsterInstance

    create = DagsterInstance.create_run_for_job

    def create_then_die(self, *args, **kwargs):
        run = create(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return run

    DagsterInstance.create_run_for_job = create_then_die
    from chunkyard.orchestration.cli import main

    sys.exit(main(sys.argv[1:]))
    """
)
STATE_VARIABLES = ("CHUNKYARD_PROJECT", "CHUNKYARD_HOME", "CHUNKYARD_CONFIGS", "DATABASE_URL", "DAGSTER_HOME")


def test_chunkyard_index_killed_at_not_started_does_not_block_the_next_one(tmp_path: Path) -> None:
    from chunkyard.orchestration.cli_session import SESSION_ENV

    cli = [sys.executable, "-m", "chunkyard.orchestration.cli"]
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}
    env["PYTHONPATH"] = str(REPO_ROOT)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tide.md").write_text("# Tides\n\nThe harbour pilot reads the OSPREY tide tables at dawn.\n")
    project = tmp_path / "work"
    project.mkdir()
    for argv in (["init"], ["add", "notes", str(docs)]):
        assert subprocess.run([*cli, *argv], cwd=project, env=env, timeout=120).returncode == 0
    script = tmp_path / "killed_index.py"
    script.write_text(KILLED_AT_NOT_STARTED)
    killed = subprocess.run(
        [sys.executable, str(script), "index"],
        cwd=project,
        env={**env, SESSION_ENV: "1"},  # in place: this process creates the run
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr

    # --no-wait: a collection held by a run in flight is refused, so passing proves it was not held
    after = subprocess.run(
        [*cli, "index", "--no-wait"], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )
    out = after.stdout + after.stderr
    assert after.returncode == 0, out
    assert "Marked 1 dead run(s) as failed" in out and "succeeded" in out, out
    assert "Waiting" not in out, out
    found = subprocess.run(
        [*cli, "search", "OSPREY tide", "-k", "1", "--mode", "bm25"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0 and "tide.md" in found.stdout, found.stdout + found.stderr
