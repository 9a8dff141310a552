"""The run judge: which runs are in flight on a collection, and what becomes of a run whose process died.

Every path that asks "may I write this collection?" or "does a run cover this gap?" (`chunkyard index`,
the document sensor's reconciler, the janitor sensor) reads `collections_in_flight`, which first fails
the dead runs (`sweep_dead_runs`), so no state a crash leaves blocks a collection. The rules per state:
- NOT_STARTED: a run created by a process that then died before it began (`chunkyard index` killed
  between creating its run and starting it). A run `creator_tags` marks is dead as soon as its creator
  (pid and process start time, on this host) is gone; any other is failed once it is older than the
  instance's run-monitoring start timeout, the rule Dagster's run monitoring applies in the daemon.
- STARTING: dead when the pid its worker reported is gone, or when none was reported within
  LAUNCH_GRACE_SECONDS of its launch (this host's runs); other hosts' after the start timeout.
- STARTED and CANCELING: dead when the pid of their RUN_START event is gone (this host's runs only:
  the default run launcher cannot check a worker's health, so Dagster's run monitoring cannot).
- QUEUED: never failed (the queue launches it once a daemon runs); it counts as in flight only while
  the queue's daemon beats (QUEUE_HEARTBEAT_SECONDS): a stack stopped with runs queued does not hold
  `chunkyard index` back, and its queued runs wait behind the CLI's run by the writer tag's limit.
A dead run is failed, the step processes it left are killed, and its pool slots are freed (a run
killed with SIGKILL stays STARTED and keeps its `embedding` pool slot, so every later embedding step
would wait for ever). Step pids come from the run's STEP_START events, and a pid counts only if its
process started before that event (so a reused pid is never hit).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun

RUN_HOST_TAG = "chunkyard/host"
# "<pid>:<process start time>" of the process that created the run (`chunkyard index`): a NOT_STARTED
# run whose creator is gone can never start.
RUN_CREATOR_TAG = "chunkyard/creator"
# The collections a run writes (comma-separated) and, for a run of one collection, the tag whose
# value the run queue allows one run at a time (orchestration.instance's tag concurrency limit).
COLLECTIONS_TAG = "chunkyard/collections"
WRITER_TAG = "chunkyard/writer"
# Dagster's name for the run queue's daemon in its heartbeats, and how old its last heartbeat may be
# for queued runs to count as in flight (the daemon beats every 30 s; a loaded machine delays it).
QUEUE_DAEMON = "QUEUED_RUN_COORDINATOR"
QUEUE_HEARTBEAT_SECONDS = 120.0
# A STARTING run whose worker has not reported its pid this long after the launch is dead. The
# worker reports it before loading the code (9 s after the launch at load 12; the whole start to
# RUN_START took ~40 s at load 12-19); a live run failed by mistake only gets retried.
LAUNCH_GRACE_SECONDS = 60.0


def this_host() -> str:
    return socket.gethostname()


def host_tags() -> dict[str, str]:
    """Tags for a run started from this process: the sweep may then judge it by its pid."""
    return {RUN_HOST_TAG: this_host()}


def creator_tags() -> dict[str, str]:
    """Tags for a run this process creates and executes itself (`chunkyard index`): its host, and its
    pid with the process's start time, so a run it leaves NOT_STARTED is judged by whether it lives."""
    import psutil

    return {**host_tags(), RUN_CREATOR_TAG: f"{os.getpid()}:{psutil.Process().create_time():.2f}"}


def _creator_alive(tag: str) -> bool | None:
    """Whether the process a `RUN_CREATOR_TAG` value names still runs (None: an unreadable value)."""
    import psutil

    pid, _, started = tag.partition(":")
    try:
        pid_number, start_time = int(pid), float(started)
    except ValueError:
        return None
    try:
        return abs(psutil.Process(pid_number).create_time() - start_time) < 1.0  # not a reused pid
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # exists, but cannot be read (another user's)
        return True


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


def _created_at(instance: DagsterInstance, run: DagsterRun, now: float) -> float:
    record = instance.get_run_record_by_id(run.run_id)
    return record.create_timestamp.timestamp() if record else now


def _starting_is_dead(instance: DagsterInstance, run: DagsterRun, now: float, grace: float) -> str | None:
    """Why a STARTING run of this host can never start (None: it still may)."""
    pid = _launched_pid(instance, run.run_id)
    if pid is not None:
        return None if _alive(pid) else f"its process (pid {pid}) is gone"
    launched = instance.get_run_stats(run.run_id).launch_time or _created_at(instance, run, now)
    if now - launched < grace:
        return None
    return f"no process started for it in {grace:.0f} s (its launcher died)"


def _not_started_is_dead(instance: DagsterInstance, run: DagsterRun, now: float) -> str | None:
    """Why a NOT_STARTED run can never start (None: it still may): its creator on this host is gone,
    or it is older than the run-monitoring start timeout (Dagster's own rule for any NOT_STARTED run)."""
    creator = run.tags.get(RUN_CREATOR_TAG)
    if creator and run.tags.get(RUN_HOST_TAG) == this_host():
        alive = _creator_alive(creator)
        if alive is False:
            return f"the process that created it (pid {creator.partition(':')[0]}) is gone"
        if alive:
            return None
    return _past_start_timeout(instance, _created_at(instance, run, now), now, "created")


def _past_start_timeout(instance: DagsterInstance, since: float, now: float, what: str) -> str | None:
    timeout = instance.run_monitoring_start_timeout_seconds if instance.run_monitoring_enabled else 0
    if timeout <= 0 or now - since < timeout:
        return None
    return f"not started {now - since:.0f} s after it was {what} (the start timeout is {timeout} s)"


def _why_dead(instance: DagsterInstance, run: DagsterRun, now: float, launch_grace: float) -> str | None:
    """Why `run` (NOT_STARTED, STARTING, STARTED or CANCELING) is dead; None while it may be alive."""
    from dagster import DagsterRunStatus

    if run.status == DagsterRunStatus.NOT_STARTED:
        return _not_started_is_dead(instance, run, now)
    mine = run.tags.get(RUN_HOST_TAG) == this_host()
    if run.status == DagsterRunStatus.STARTING:
        if mine:
            return _starting_is_dead(instance, run, now, launch_grace)
        launched = instance.get_run_stats(run.run_id).launch_time or _created_at(instance, run, now)
        return _past_start_timeout(instance, launched, now, "launched")
    if not mine:
        return None  # another host's process: never judged by a pid looked up here
    pid = _run_pid(instance, run.run_id)
    return None if pid is None or _alive(pid) else f"its process (pid {pid} on {this_host()}) is gone"


def _begun_or_beginning() -> list:
    """The run states a crash can leave that no queue holds: the ones the judge rules on."""
    from dagster import DagsterRunStatus

    return [
        DagsterRunStatus.NOT_STARTED,
        DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED,
        DagsterRunStatus.CANCELING,
    ]


def fail_dead_run(instance: DagsterInstance, run: DagsterRun, why: str) -> None:
    """Fail `run`, kill the step processes it left and free its pool slots."""
    instance.report_run_failed(run, message=f"The run is dead: {why}. Marked failed, pool slots freed.")
    kill_orphaned_steps(instance, run.run_id)  # before freeing: a live step could still claim slots
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def sweep_dead_runs(instance: DagsterInstance, launch_grace: float = LAUNCH_GRACE_SECONDS) -> list[str]:
    """Fail the runs that can never end (the rules in the module docstring) and free their slots; their ids.

    `launch_grace`: how long after its launch a STARTING run of this host may go without a worker pid
    (the daemon died mid-launch: run monitoring would wait out its start timeout, and a change behind
    it would wait with it).
    """
    from dagster import RunsFilter

    swept = []
    now = time.time()
    for run in instance.get_runs(RunsFilter(statuses=_begun_or_beginning())):
        why = _why_dead(instance, run, now, launch_grace)
        if why is not None:
            fail_dead_run(instance, run, why)
            swept.append(run.run_id)
    return swept


def queue_daemon_alive(instance: DagsterInstance, now: float | None = None) -> bool:
    """Whether the run queue's daemon has beaten within QUEUE_HEARTBEAT_SECONDS (so queued runs will start)."""
    beat = instance.get_daemon_heartbeats().get(QUEUE_DAEMON)
    return beat is not None and (now or time.time()) - beat.timestamp < QUEUE_HEARTBEAT_SECONDS


def collections_in_flight(instance: DagsterInstance, prefixes: Mapping[str, str]) -> dict[str, list[str]]:
    """Collection (`prefixes`: name -> asset key prefix) -> ids of the live runs touching it (by
    COLLECTIONS_TAG or asset selection), after failing the dead ones: the one answer to "may I write
    it?" (`chunkyard index`) and "does a run cover its gap?" (the reconciler). Queued runs count only
    while the queue's daemon beats."""
    from dagster import DagsterRunStatus, RunsFilter

    sweep_dead_runs(instance)
    statuses = _begun_or_beginning()
    if queue_daemon_alive(instance):
        statuses.append(DagsterRunStatus.QUEUED)
    found: dict[str, list[str]] = {}
    for run in instance.get_runs(RunsFilter(statuses=statuses)):
        tagged = set(run.tags.get(COLLECTIONS_TAG, "").split(","))
        selected = {key.path[0] for key in (run.asset_selection or ())}
        for name, prefix in prefixes.items():
            if name in tagged or prefix in selected:
                found.setdefault(name, []).append(run.run_id)
    return found


def fail_runs_of_a_gone_stack(instance: DagsterInstance) -> list[str]:
    """Fail this host's runs still NOT_STARTED, STARTING, STARTED or CANCELING and free their slots; their ids.

    Only for a local stack that is starting (`chunkyard instance` under `chunkyard stack up`, which
    refuses to start while any process of an earlier stack runs): no process of the stack that could
    run them is left (a run whose reported pid or creator is alive, started some other way, is left
    alone). A run that was STARTING when its stack stopped has no pid for `sweep_dead_runs` to judge,
    and run monitoring would wait out its start timeout before the reconciler could retry it.
    """
    from dagster import DagsterRunStatus, RunsFilter

    statuses = [
        DagsterRunStatus.NOT_STARTED,
        DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED,
        DagsterRunStatus.CANCELING,
    ]
    failed = []
    for run in instance.get_runs(RunsFilter(statuses=statuses, tags={RUN_HOST_TAG: this_host()})):
        if run.status == DagsterRunStatus.NOT_STARTED:
            if _creator_alive(run.tags.get(RUN_CREATOR_TAG, "")):
                continue
        else:
            read_pid = _launched_pid if run.status == DagsterRunStatus.STARTING else _run_pid
            pid = read_pid(instance, run.run_id)
            if pid is not None and _alive(pid):
                continue
        instance.report_run_failed(
            run, message="Its stack stopped before it ended: marked failed on restart."
        )
        kill_orphaned_steps(instance, run.run_id)
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run.run_id)
    return failed
