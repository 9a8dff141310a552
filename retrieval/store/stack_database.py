"""The database of a project's local stack (`chunkyard stack up`), found from its state folder.

`chunkyard stack up` runs its own Postgres (`<chunkyard home>/stack/pgdata`, on a loopback TCP port
with the password in `<chunkyard home>/stack/pgpass`), not the embedded server a bare command starts
(`<chunkyard home>/pg`). A command run in a stack project without DATABASE_URL (`chunkyard lag`,
`search`, `index`, ...) uses the stack's database while its server runs (`running_stack_url`), and
refuses with the fix when only the stack's database exists and it is stopped, rather than starting
an empty embedded one (`StackDatabaseStopped`). The layout is named here once; `orchestration.stack`
and `orchestration.stack_local` import it.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from chunkyard.retrieval.settings.project import ProjectError

STACK_STATE_DIR = "stack"  # <chunkyard home>/stack: the stack's data, password, logs and pid record
PGDATA_DIR = "pgdata"
PASSWORD_FILE = "pgpass"
EMBEDDED_DATA_DIR = "pg"  # <chunkyard home>/pg: the embedded server a bare command starts
DB_USER = "chunkyard"
DB_NAME = "chunkyard"


class StackDatabaseStopped(ProjectError):
    """The project's only database is its stack's, and the stack's server is not running."""


def stack_state_dir(home: Path) -> Path:
    return home / STACK_STATE_DIR


def running_stack_url(home: Path) -> str | None:
    """The DATABASE_URL of the stack's Postgres when it runs from `<home>/stack`, else None.

    Its live postmaster says where it listens (`postmaster.pid`: pid, port, listen address); the
    password is the stack's own (`pgpass`).
    """
    state = stack_state_dir(home)
    lines = _postmaster_lines(state / PGDATA_DIR)
    if lines is None or len(lines) < 6 or not _alive(lines[0]):
        return None
    try:
        port = int(lines[3])
        secret = (state / PASSWORD_FILE).read_text(encoding="utf-8").strip()
    except (ValueError, OSError):
        return None
    host = lines[5].split(",")[0].strip() or "127.0.0.1"
    if host in ("*", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"postgresql://{DB_USER}:{quote(secret, safe='')}@{host}:{port}/{DB_NAME}"


def check_stack_database_running(home: Path) -> None:
    """`StackDatabaseStopped` when `<home>` holds a stack's database but no embedded one and the stack
    is not running: a bare command would otherwise start an empty embedded database beside it."""
    state = stack_state_dir(home)
    if not (state / PGDATA_DIR / "PG_VERSION").exists() or (home / EMBEDDED_DATA_DIR).exists():
        return
    raise StackDatabaseStopped(
        f"this project's database is its stack's ({state / PGDATA_DIR}), and the stack is not running: "
        "start it with `chunkyard stack up`, or set DATABASE_URL to the database to use"
    )


def _postmaster_lines(pgdata: Path) -> list[str] | None:
    try:
        return (pgdata / "postmaster.pid").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None


def _alive(pid_text: str) -> bool:
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
