"""Finding and stopping a local stack's processes, with or without its `stack.json`.

Every process `chunkyard stack up` starts carries STACK_ENV (the stack's state folder) in its
environment, and so does everything those processes start (code servers, run workers): `stack down`
and the `stack up` refusal find them by it even when the supervisor is gone and `stack.json` with
it. Postgres is always stopped with a fast shutdown (SIGINT to the postmaster, what `pg_ctl stop -m
fast` sends): never SIGKILL, so the next start needs no crash recovery.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

STACK_ENV = "CHUNKYARD_STACK"
RECORD = "stack.json"
STOP_TIMEOUT_S = 30.0
POSTGRES_STOP_TIMEOUT_S = 120.0


def read_record(state: Path) -> dict | None:
    try:
        return json.loads((state / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stack_processes(state: Path) -> list[int]:
    """Pids of live processes whose environment names this stack (`STACK_ENV` = `state`)."""
    import psutil

    wanted = str(state)
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            mine = process.pid != os.getpid() and process.environ().get(STACK_ENV) == wanted
            if mine and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
    return found


def postmaster_pid(pgdata: Path) -> int | None:
    """The live postmaster of `pgdata` (its `postmaster.pid`), if any."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text(encoding="utf-8").split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def running_stack(state: Path) -> str | None:
    """One line on the stack running from `state` (None: none), for `stack up` to refuse with."""
    record = read_record(state)
    if record is not None and _alive(int(record.get("pid", 0))):
        return f"a stack runs here already (supervisor pid {record['pid']}); `chunkyard stack down` stops it"
    left = stack_processes(state)
    postmaster = postmaster_pid(state / "pgdata")
    if left or postmaster:
        pids = sorted({*left, *([postmaster] if postmaster else [])})
        return (
            f"processes of an earlier stack still run here (pids {', '.join(map(str, pids[:8]))}); "
            "`chunkyard stack down` stops them"
        )
    return None


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def group_members(pgid: int) -> list[int]:
    """Pids still in process group `pgid` (run workers a daemon's code server started, for example)."""
    import psutil

    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError, OSError):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
    return members


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of `pids` lives (reaping our own children); those still alive."""
    end = time.monotonic() + timeout
    while True:
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        left = [pid for pid in pids if _alive(pid)]
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.2)


def stop_postgres(pid: int, timeout: float = POSTGRES_STOP_TIMEOUT_S) -> bool:
    """Fast shutdown of the postmaster `pid` (SIGINT); whether it stopped within `timeout`."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGINT)
    return not wait_gone([pid], timeout)


def stop_groups(pids: list[int], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the process groups of `pids`, then SIGKILL what is left after `timeout` (never Postgres)."""
    groups = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            groups.add(os.getpgid(pid))
    for pgid in groups:
        signal_group(pgid, signal.SIGTERM)
    for pid in wait_gone(pids, timeout):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    wait_gone(pids, 10)


def down(state: Path, timeout: float = 120.0) -> str:
    """Stop the stack of `state`: its supervisor (SIGTERM: it stops the services in order), then any
    process still carrying the stack's marker, Postgres last with a fast shutdown; what was done."""
    done = []
    record = read_record(state)
    if record is not None and _alive(int(record.get("pid", 0))):
        pid = int(record["pid"])
        os.kill(pid, signal.SIGTERM)
        if wait_gone([pid], timeout):
            done.append(f"supervisor pid {pid} did not stop in {timeout:.0f} s")
        else:
            done.append(f"stopped the stack (supervisor pid {pid})")
    postmaster = postmaster_pid(state / "pgdata")
    # postgres' own backends carry the marker too: the postmaster stops them itself
    left = [pid for pid in stack_processes(state) if not _is_postgres(pid, postmaster)]
    if left:
        stop_groups(left)
        done.append(f"stopped {len(left)} process(es) left without a supervisor")
    if postmaster:
        stopped = stop_postgres(postmaster)
        done.append(
            f"stopped Postgres (pid {postmaster}, fast shutdown)"
            if stopped
            else f"Postgres (pid {postmaster}) is still shutting down"
        )
    with contextlib.suppress(OSError):
        (state / RECORD).unlink()
    return "; ".join(done) if done else "no stack is running here"


def _is_postgres(pid: int, postmaster: int | None) -> bool:
    import psutil

    if postmaster is None:
        return False
    try:
        process = psutil.Process(pid)
        return pid == postmaster or process.ppid() == postmaster
    except psutil.Error:
        return False
