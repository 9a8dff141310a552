"""How a `chunkyard` command ends: one line per error with its exit status, and a clean stop.

Configuration and usage errors (exit 2) print one line naming what is at fault; runtime failures
(exit 1) a line and a `hint:`. SIGTERM unwinds like Ctrl-C, so the embedded Postgres a command
started is stopped (unless another chunkyard process still uses it).
"""

from __future__ import annotations

import signal
import sys

from chunkyard.chunking.documents.printable import printable


class UsageError(Exception):
    """A command asked for something that is not there (exit 2); the message says what instead."""


class RuntimeFailure(Exception):
    """A command ran and failed (exit 1); carries the hint that goes under the message."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class stops_embedded_postgres:
    """SIGTERM ends the command like Ctrl-C; either way the embedded Postgres this process started
    is stopped unless another chunkyard process still uses it (pgserver's handle list)."""

    def __enter__(self) -> None:
        from chunkyard.retrieval.store.db import embedded_servers

        self._before = embedded_servers()  # a caller's own servers (tests calling main()) stay up
        self._previous = signal.getsignal(signal.SIGTERM)
        if self._previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _raise_interrupt)

    def __exit__(self, *exc: object) -> None:
        from chunkyard.retrieval.store.db import stop_embedded_servers

        try:
            stop_embedded_servers(keep=self._before)
        finally:
            if self._previous in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Stopped(KeyboardInterrupt):
    """SIGTERM: unwinds like Ctrl-C (cleanup runs), reported as a requested stop."""


def _raise_interrupt(signum: int, frame: object) -> None:
    raise Stopped


def report(command: str, exc: Exception) -> int:
    """One line naming what is at fault; exit 2 for configuration and usage, 1 (plus a hint) otherwise."""
    from chunkyard.pipeline.benchmark.run import BenchmarkError
    from chunkyard.retrieval.integrations.client import AuthenticationError, ServiceError
    from chunkyard.retrieval.query.results import IndexNotFoundError
    from chunkyard.retrieval.settings.config import SettingsError
    from chunkyard.retrieval.settings.config_checks import SettingsErrors
    from chunkyard.retrieval.settings.option_schema import SearchError
    from chunkyard.retrieval.store.server import DatabaseSelfCheckError

    prefix = f"chunkyard {command}" if command else "chunkyard"
    if isinstance(exc, SettingsErrors):
        print(f"{prefix}: {len(exc.problems)} configuration problem(s), nothing was run:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {printable(str(problem))}", file=sys.stderr)
        return 2
    # one line, and a file name in it cannot drive the terminal
    message = printable(" ".join(str(exc).split())) or type(exc).__name__
    if isinstance(exc, DatabaseSelfCheckError):
        print(f"{prefix}: {message}\nhint: {exc.hint}", file=sys.stderr)
        return 1
    if isinstance(exc, SettingsError | UsageError | IndexNotFoundError | SearchError | BenchmarkError):
        print(f"{prefix}: {message}", file=sys.stderr)
        return 2
    if isinstance(exc, RuntimeFailure):
        hint = exc.hint
    elif isinstance(exc, ServiceError):
        hint = "is `chunkyard serve` still running? `chunkyard search --no-service` searches in-process"
    elif isinstance(exc, AuthenticationError):
        hint = "set CHUNKYARD_API_KEY to the service's key"
    elif type(exc).__module__.startswith("psycopg"):
        hint = "the database failed: check DATABASE_URL, or unset it to use the project's embedded Postgres"
    elif isinstance(exc, OSError) and "address already in use" in message.lower():
        hint = "the port is taken: pass --port"
    else:
        hint = "rerun with --debug for the traceback"
        message = f"{type(exc).__name__}: {message}"
    print(f"{prefix}: {message}\nhint: {hint}", file=sys.stderr)
    _print_server_log(message)
    return 1


def _print_server_log(message: str) -> None:
    """After a failure on a lost database connection, what the embedded server's log says about it
    (a crashed backend's signal, recovery, a full disk): the cause is there, not in the client's error."""
    from chunkyard.retrieval.store.db import embedded_log_excerpt, lost_connection

    if not lost_connection(message):
        return
    found = embedded_log_excerpt()
    if found:
        path, lines = found
        print(f"the embedded server's log ({path}) says:", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
