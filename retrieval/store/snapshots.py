"""The SQL of alias snapshots (`retrieval.indexing.snapshots`): an index's published rows copied under a
snapshot's name, and the pins that keep one. Each function runs in the caller's transaction."""

from __future__ import annotations

from typing import Any

from chunkyard.retrieval.store.migrations import (
    CHUNK_COLUMNS,
    INDEX_DOCUMENT_COLUMNS,
    POSTING_COLUMNS,
    STATS_COLUMNS,
    TERM_COLUMNS,
    column_names,
)
from chunkyard.retrieval.store.partitions import partition_names
from psycopg import Connection, sql

# per-index rows outside the partitions: (table, its columns after index_name)
_ROW_TABLES = (
    ("bm25_terms", TERM_COLUMNS),
    ("bm25_stats", STATS_COLUMNS),
    ("index_documents", INDEX_DOCUMENT_COLUMNS),
)


def share_lock_published(conn: Connection, index_name: str) -> tuple[int, int | None, dict[str, Any]] | None:
    """(version, dim, config) of the index, its row share-locked until the transaction ends (a publish
    of it waits); None: no such index."""
    row = conn.execute(
        "SELECT version, dim, config FROM indexes WHERE name = %s FOR SHARE", (index_name,)
    ).fetchone()
    return None if row is None else (int(row[0] or 0), row[1], row[2])


def lock_snapshot(conn: Connection, snapshot: str) -> None:
    """Serialise creating and dropping one snapshot (aliases sharing it take different alias locks)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('chunkyard.snapshot:' || %s))", (snapshot,))


def index_exists(conn: Connection, index_name: str) -> bool:
    """Whether an `indexes` row of this name exists."""
    return conn.execute("SELECT 1 FROM indexes WHERE name = %s", (index_name,)).fetchone() is not None


def copy_index_row(conn: Connection, index_name: str, snapshot: str, config_name: str) -> None:
    """The snapshot's `indexes` row: the index's, under the snapshot's name, config name and partition."""
    conn.execute(
        "INSERT INTO indexes (name, collection, config_name, config, config_hash, partition, model_id, dim,"
        " version, published_at) SELECT %s, collection, %s, config, config_hash, %s, model_id, dim, version,"
        " published_at FROM indexes WHERE name = %s",
        (snapshot, config_name, partition_names(snapshot)["chunks"], index_name),
    )


def copy_published_rows(conn: Connection, index_name: str, snapshot: str) -> None:
    """The index's chunks and postings into the snapshot's partitions (already created), then its BM25
    terms and statistics and `index_documents` rows under the snapshot's name."""
    source, target = partition_names(index_name), partition_names(snapshot)
    for kind, columns in (("chunks", CHUNK_COLUMNS), ("postings", POSTING_COLUMNS)):
        _copy(conn, source[kind], target[kind], column_names(columns), index_name, snapshot)
    for table, columns in _ROW_TABLES:
        _copy(conn, table, table, column_names(columns), index_name, snapshot)


def _copy(
    conn: Connection, source: str, target: str, columns: tuple[str, ...], index_name: str, snapshot: str
) -> None:
    listed = sql.SQL(", ").join(sql.Identifier(column) for column in columns)
    conn.execute(
        sql.SQL("INSERT INTO {} (index_name, {}) SELECT %s, {} FROM {} WHERE index_name = %s").format(
            sql.Identifier(target), listed, listed, sql.Identifier(source)
        ),
        (snapshot, index_name),
    )


def is_pinned(conn: Connection, index_name: str, version: int) -> bool:
    """Whether an alias target pins this version of the index."""
    row = conn.execute(
        "SELECT 1 FROM alias_targets WHERE index_name = %s AND index_version = %s LIMIT 1",
        (index_name, version),
    ).fetchone()
    return row is not None
