"""`chunkyard index` runs its Dagster run in a process session of its own, so Ctrl-C reaches only it.

A terminal's Ctrl-C signals its whole foreground process group. Dagster starts helper processes for
each step (the compute-log `tail` and its `watch_orphans.py` watcher): in the command's group they
would get SIGINT too and each print a `KeyboardInterrupt` traceback. So the command re-runs itself in
a new session (`start_new_session`) and forwards SIGINT and SIGTERM to that child alone; the child
interrupts its run by Dagster's own handling of KeyboardInterrupt, stops its helpers with SIGTERM,
and prints the one line "interrupted; run `chunkyard index` again to resume". A hang-up is passed on
too, and on Linux the child gets SIGTERM if this process dies without passing anything on.

What the command has already worked out before it re-runs itself (`chunkyard index`: its settings,
read and checked once) is handed to the child through a pipe (`carried`), not worked out again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Sequence

SESSION_ENV = "CHUNKYARD_RUN_SESSION"  # set in the child: it runs the command itself
CARRIED_ENV = "CHUNKYARD_CARRIED_FD"  # in the child: the pipe the parent writes what it carries into
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # prctl(2)


def in_own_session() -> bool:
    """Whether this process is the child that runs the command (or was asked to run it in place)."""
    return bool(os.environ.get(SESSION_ENV))


def run_in_own_session(argv: Sequence[str], carried: object = None) -> int:
    """`chunkyard ARGV` in a child process of a new session, with this process's terminal and
    environment; SIGINT and SIGTERM are passed on to the child alone. `carried` (picklable) is what the
    child's `carried_from_parent` returns. Its exit status."""
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "chunkyard.orchestration.cli", *argv],
            env={**os.environ, SESSION_ENV: "1", CARRIED_ENV: str(read_end)},
            start_new_session=True,
            pass_fds=(read_end,),
            preexec_fn=_terminate_with_parent if sys.platform.startswith("linux") else None,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        # a child that ended before reading it (BrokenPipeError): its exit status says why
        with contextlib.suppress(BrokenPipeError), os.fdopen(write_end, "wb") as pipe:
            pipe.write(pickle.dumps(carried))
        code = child.wait()  # resumed after each forwarded signal (PEP 475)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + N


def carried_from_parent() -> object:
    """In the child: what the parent carried over (None when there is none, as for a command run in
    place with CHUNKYARD_RUN_SESSION set by hand). Read once; the variable is gone afterwards."""
    fd = os.environ.pop(CARRIED_ENV, "")
    if not fd.isdigit():
        return None
    try:
        with os.fdopen(int(fd), "rb") as pipe:
            data = pipe.read()
    except OSError:  # not an open pipe of this process (an inherited variable)
        return None
    return pickle.loads(data) if data else None  # noqa: S301 (this process's own parent wrote it)


def _terminate_with_parent() -> None:
    """In the child before it runs: SIGTERM (a clean stop) when the parent dies, even by SIGKILL."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
