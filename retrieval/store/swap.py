"""The tables a large full build fills beside an index's live partitions, and their swap for the live ones.

The DDL of `retrieval.indexing.swap`: each function runs in the caller's transaction (the BM25 stage's
for the postings, the publish's for the chunks and the swap), which keeps its locks to the commit.
"""

from __future__ import annotations

import time

import psycopg
from chunkyard.retrieval.store.maintenance import set_maintenance_work_mem
from chunkyard.retrieval.store.partitions import next_name, partition_names
from psycopg import Connection, sql

# (parent, partition key, its keys and indexes as (suffix, columns, primary key?)) in the live schema
_TABLES = (
    (
        "chunks",
        "chunks",
        (
            ("pkey", ("index_name", "chunk_id"), True),
            ("index_name_doc_id_idx", ("index_name", "doc_id"), False),
        ),
    ),
    (
        "bm25_postings",
        "postings",
        (
            ("pkey", ("index_name", "term", "chunk_id"), True),
            ("index_name_chunk_id_idx", ("index_name", "chunk_id"), False),
        ),
    ),
)


def lock_next(conn: Connection, table: str) -> None:
    """Hold `table` (a next table) to the commit: re-staging the index (which drops it) waits."""
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table)))


def create_next(conn: Connection, index_name: str, kind: str) -> None:
    """An empty table LIKE the parent of the partition `kind`, under the partition's next name, with a
    CHECK of the partition bound (so attaching it scans nothing); a killed build's is dropped first."""
    parent = next(parent for parent, k, _ in _TABLES if k == kind)
    part = next_name(partition_names(index_name)[kind])
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(part)))  # a killed build's
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION,"
            " CONSTRAINT {} CHECK (index_name = {}))"
        ).format(
            sql.Identifier(part),
            sql.Identifier(parent),
            sql.Identifier(f"{part}_key"),
            sql.Literal(index_name),  # DDL takes no parameters; the partition bound is the same literal
        )
    )


def build_keys(conn: Connection, index_name: str, kind: str, work_mem: str) -> None:
    """The primary key and B-trees of the loaded next table of `kind`, built by sort with `work_mem`."""
    live = partition_names(index_name)[kind]
    keys = next(keys for _, k, keys in _TABLES if k == kind)
    set_maintenance_work_mem(conn, work_mem)
    for suffix, columns, primary in keys:
        listed = sql.SQL(", ").join(map(sql.Identifier, columns))
        name = sql.Identifier(next_name(f"{live}_{suffix}"))
        table = sql.Identifier(next_name(live))
        if primary:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(table, name, listed)
            )
        else:
            conn.execute(sql.SQL("CREATE INDEX {} ON {} ({})").format(name, table, listed))


def swap_in(conn: Connection, index_name: str, lock_timeout: str, lock_tries: int) -> None:
    """Drop the live partitions and attach the next tables under their names (see `lock_live` for the
    locks, `lock_timeout` and `lock_tries`)."""
    parts = partition_names(index_name)
    lock_live(conn, parts, lock_timeout, lock_tries)
    for parent, kind, keys in _TABLES:
        live, part = parts[kind], next_name(parts[kind])
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(live)))
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(part), sql.Identifier(live))
        )
        names = [f"{live}_{suffix}" for suffix, _, _ in keys]
        if kind == "chunks":
            names.append(parts["hnsw"])
        for name in names:
            conn.execute(
                sql.SQL("ALTER INDEX IF EXISTS {} RENAME TO {}").format(
                    sql.Identifier(next_name(name)), sql.Identifier(name)
                )
            )
        # the CHECK constraint proves the partition bound: ATTACH scans no row
        conn.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.Identifier(parent), sql.Identifier(live), sql.Literal(index_name)
            )
        )
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                sql.Identifier(live), sql.Identifier(f"{part}_key")
            )
        )


def lock_live(conn: Connection, parts: dict[str, str], lock_timeout: str, lock_tries: int) -> None:
    """The swap's locks: both parents (readers lock `chunks` first, see `retrieval.store.read_lock`) and the
    live partitions. Each of the first `lock_tries - 1` tries waits at most `lock_timeout`, so a long
    reader holds up only the swap, not every reader queued behind it; the last waits as long as it takes."""
    tables = [sql.SQL("ONLY chunks"), sql.SQL("ONLY bm25_postings")]
    tables += [sql.Identifier(parts[kind]) for kind in ("chunks", "postings")]
    statement = sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.SQL(", ").join(tables))
    previous = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
    for attempt in range(lock_tries - 1):
        try:
            with conn.transaction():  # a savepoint: a timed-out try leaves the build intact
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (lock_timeout,))
                conn.execute(statement)
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.1 * 2**attempt)
            continue
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (previous,))
        return
    conn.execute(statement)
