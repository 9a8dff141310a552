"""Dead runs: fail the runs whose process is gone and free the pool slots they still hold.

A run killed with SIGKILL (or one whose failure event could not be written, on a full disk)
stays STARTED and keeps its `embedding` pool slot, so every later embedding step would wait
for ever. chunkyard tags the runs it starts with the host that runs them (`RUN_HOST_TAG`); the
sweep looks only at this host's runs, reads the pid of each run's process from its RUN_START
event, and fails the runs whose process no longer exists; a STARTING run is judged by the pid
its worker reports first, or failed when none was reported within LAUNCH_GRACE_SECONDS of its
launch. Step processes such a run left running (a multiprocess step whose parent died before
`executors.die_with_parent` could act, or on a system without it) are killed: their pids come from the run's STEP_START events, and a pid counts
only if its process started before that event (so a reused pid is never hit). The document sensor
and the CLI sweep before they start work.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster import DagsterInstance

RUN_HOST_TAG = "chunkyard/host"
# A STARTING run whose worker has not reported its pid this long after the launch is dead. The
# worker reports it before loading the code (9 s after the launch at load 12; the whole start to
# RUN_START took ~40 s at load 12-19); a live run failed by mistake only gets retried.
LAUNCH_GRACE_SECONDS = 60.0


def this_host() -> str:
    return socket.gethostname()


def host_tags() -> dict[str, str]:
    """Tags for a run started from this process: the sweep may then judge it by its pid."""
    return {RUN_HOST_TAG: this_host()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _run_pid(instance: DagsterInstance, run_id: str) -> int | None:
    from dagster import DagsterEventType

    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_START, limit=1).records
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is not None and event.pid is not None:
            return int(event.pid)
    return None


def kill_orphaned_steps(instance: DagsterInstance, run_id: str) -> list[int]:
    """SIGKILL the step processes of `run_id` still alive on this host; their pids."""
    import signal

    import psutil
    from dagster import DagsterEventType

    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_START).records
    killed = []
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None or event.pid is None or event.pid == os.getpid():
            continue
        try:
            process = psutil.Process(int(event.pid))
            if process.create_time() > record.event_log_entry.timestamp + 1.0:
                continue  # a newer process that got the same pid
            process.send_signal(signal.SIGKILL)
            killed.append(int(event.pid))
        except psutil.Error:
            continue
    return killed


def _launched_pid(instance: DagsterInstance, run_id: str) -> int | None:
    """The pid a STARTING run's worker reported: its first event, "Started process for run (pid: N).",
    written before it loads the code."""
    import re

    from dagster import DagsterEventType

    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT, limit=20).records
    for record in records:
        event = record.event_log_entry.dagster_event
        found = re.match(r"Started process for run \(pid: (\d+)\)", (event.message or "") if event else "")
        if found:
            return int(found.group(1))
    return None


def _starting_is_dead(instance: DagsterInstance, run, now: float, grace: float) -> str | None:
    """Why a STARTING run can never start (None: it still may)."""
    pid = _launched_pid(instance, run.run_id)
    if pid is not None:
        return None if _alive(pid) else f"its process (pid {pid}) is gone"
    record = instance.get_run_record_by_id(run.run_id)
    launched = instance.get_run_stats(run.run_id).launch_time or (
        record.create_timestamp.timestamp() if record else now
    )
    if now - launched < grace:
        return None
    return f"no process started for it in {grace:.0f} s (its launcher died)"


def sweep_dead_runs(instance: DagsterInstance, launch_grace: float = LAUNCH_GRACE_SECONDS) -> list[str]:
    """Fail this host's runs whose process is gone and free their slots; their ids.

    STARTED and CANCELING runs are judged by their RUN_START pid; a STARTING run by the pid its worker
    reported, or, when no worker reported one `launch_grace` seconds after the launch, as dead (the
    daemon died mid-launch: run monitoring would wait out its start timeout, and a change behind it
    would wait with it).
    """
    import time

    from dagster import DagsterRunStatus, RunsFilter

    host = this_host()
    runs = instance.get_runs(
        RunsFilter(
            statuses=[DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING],
            tags={RUN_HOST_TAG: host},
        )
    )
    swept = []
    now = time.time()
    for run in runs:
        if run.status == DagsterRunStatus.STARTING:
            why = _starting_is_dead(instance, run, now, launch_grace)
        else:
            pid = _run_pid(instance, run.run_id)
            why = None if pid is None or _alive(pid) else f"its process (pid {pid} on {host}) is gone"
        if why is None:
            continue
        instance.report_run_failed(run, message=f"The run is dead: {why}. Marked failed, pool slots freed.")
        kill_orphaned_steps(instance, run.run_id)  # before freeing: a live step could still claim slots
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        swept.append(run.run_id)
    return swept


def fail_runs_of_a_gone_stack(instance: DagsterInstance) -> list[str]:
    """Fail this host's runs still STARTING, STARTED or CANCELING and free their slots; their ids.

    Only for a local stack that is starting (`chunkyard instance` under `chunkyard stack up`, which
    refuses to start while any process of an earlier stack runs): no process of the stack that could
    run them is left (a run whose reported pid is alive, started some other way, is left alone). A run
    that was STARTING when its stack stopped has no pid for `sweep_dead_runs` to judge, and run
    monitoring would wait out its start timeout before the reconciler could retry it.
    """
    from dagster import DagsterRunStatus, RunsFilter

    statuses = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
    failed = []
    for run in instance.get_runs(RunsFilter(statuses=statuses, tags={RUN_HOST_TAG: this_host()})):
        pid = (_launched_pid if run.status == DagsterRunStatus.STARTING else _run_pid)(instance, run.run_id)
        if pid is not None and _alive(pid):
            continue
        instance.report_run_failed(
            run, message="Its stack stopped before it ended: marked failed on restart."
        )
        kill_orphaned_steps(instance, run.run_id)
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run.run_id)
    return failed
