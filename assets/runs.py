"""Dead runs: fail the runs whose process is gone and free the pool slots they still hold.

A run killed with SIGKILL (or one whose failure event could not be written, on a full disk)
stays STARTED and keeps its `embedding` pool slot, so every later embedding step would wait
for ever. chunkyard tags the runs it starts with the host that runs them (`RUN_HOST_TAG`); the
sweep looks only at this host's runs, reads the pid of each run's process from its RUN_START
event, and fails the runs whose process no longer exists. The document sensor and the CLI
sweep before they start work.
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
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        swept.append(run.run_id)
    return swept
