"""Dead runs: fail the runs whose process is gone and free the pool slots they still hold.

A run killed with SIGKILL (or one whose failure event could not be written, on a full disk)
stays STARTED and keeps its `embedding` pool slot, so every later embedding step would wait
for ever. chunkyard tags the runs it starts with the host that runs them (`RUN_HOST_TAG`); the
sweep looks only at this host's runs, reads the pid of each run's process from its RUN_START
event, and fails the runs whose process no longer exists. Step processes such a run left running
(a multiprocess step whose parent died before `executors.die_with_parent` could act, or on a
system without it) are killed: their pids come from the run's STEP_START events, and a pid counts
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


def sweep_dead_runs(instance: DagsterInstance) -> list[str]:
    """Fail this host's started runs whose process is gone and free their slots; their ids."""
    from dagster import DagsterRunStatus, RunsFilter

    host = this_host()
    runs = instance.get_runs(
        RunsFilter(
            statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING],
            tags={RUN_HOST_TAG: host},
        )
    )
    swept = []
    for run in runs:
        pid = _run_pid(instance, run.run_id)
        if pid is None or _alive(pid):
            continue
        instance.report_run_failed(
            run, message=f"The run's process (pid {pid} on {host}) is gone: marked failed, pool slots freed."
        )
        kill_orphaned_steps(instance, run.run_id)  # before freeing: a live step could still claim slots
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        swept.append(run.run_id)
    return swept
