"""Serving aliases and the snapshots they may point at, in the caller's transaction."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from chunkyard.retrieval.settings.names import SNAPSHOT_MARK
from chunkyard.retrieval.store.indexes import partition_names
from chunkyard.retrieval.store.migrations import (
    CHUNK_COLUMNS,
    INDEX_DOCUMENT_COLUMNS,
    POSTING_COLUMNS,
    STATS_COLUMNS,
    TERM_COLUMNS,
    column_names,
)
from psycopg import Connection, sql

# Serving aliases in SQL: the `aliases` pointers and their `alias_targets` rows, in the caller's transaction.

# What one target row is read as: its columns, the live index's version and the snapshot's name.
_TARGET_SQL = (
    "SELECT t.alias, t.generation, t.index_name, t.index_version, t.options, t.note, t.set_at,"
    " t.previous, i.version, t.scores, s.name FROM alias_targets t LEFT JOIN indexes i ON i.name = t.index_name"
    # the snapshot's name, spelled as IndexName.snapshot spells it
    f" LEFT JOIN indexes s ON s.name = t.index_name || '{SNAPSHOT_MARK}' || t.index_version"
)
_CURRENT = " JOIN aliases a ON a.name = t.alias AND a.generation = t.generation"


@dataclass(frozen=True)
class TargetRow:
    """One `alias_targets` row as stored, with what it points at now (`query.aliases` parses it)."""

    alias: str
    generation: int
    index_name: str
    index_version: int
    options: dict[str, Any]
    note: str
    set_at: datetime | None
    previous: int | None
    live_version: int | None  # the live index's version now (None: no such index)
    scores: dict[str, Any]
    snapshot_name: str | None  # the snapshot of `index_name` at `index_version`, where it exists

    @classmethod
    def of(cls, row: Sequence[Any]) -> TargetRow:
        return cls(
            alias=row[0],
            generation=int(row[1]),
            index_name=row[2],
            index_version=int(row[3]),
            options=dict(row[4] or {}),
            note=row[5],
            set_at=row[6],
            previous=row[7],
            live_version=None if row[8] is None else int(row[8]),
            scores=dict(row[9] or {}),
            snapshot_name=row[10],
        )


def current_target(conn: psycopg.Connection, name: str) -> TargetRow | None:
    """The alias's current target row (one indexed lookup); None when no alias has that name.

    Raises `psycopg.errors.UndefinedTable` on a database from before the aliases migration.
    """
    row = conn.execute(_TARGET_SQL + _CURRENT + " WHERE a.name = %s", (name,)).fetchone()
    return TargetRow.of(row) if row else None


def current_targets(conn: psycopg.Connection) -> list[TargetRow]:
    """Every alias's current target row, by alias name."""
    return [
        TargetRow.of(row) for row in conn.execute(_TARGET_SQL + _CURRENT + " ORDER BY t.alias").fetchall()
    ]


def kept_targets(conn: psycopg.Connection, name: str) -> list[TargetRow]:
    """The alias's kept target rows, newest first (the current one among them)."""
    rows = conn.execute(_TARGET_SQL + " WHERE t.alias = %s ORDER BY t.generation DESC", (name,)).fetchall()
    return [TargetRow.of(row) for row in rows]


def lock_alias(conn: psycopg.Connection, name: str) -> None:
    """Serialise writers of one alias until the caller's transaction ends (readers never wait)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('chunkyard.alias:' || %s))", (name,))


def index_exists(conn: psycopg.Connection, index_name: str) -> bool:
    """Whether an index of that name is registered (an alias may not shadow one)."""
    return conn.execute("SELECT 1 FROM indexes WHERE name = %s", (index_name,)).fetchone() is not None


def current_generation(conn: psycopg.Connection, name: str) -> int | None:
    """The generation the alias points at; None when it does not exist."""
    row = conn.execute("SELECT generation FROM aliases WHERE name = %s", (name,)).fetchone()
    return row[0] if row else None


def next_generation(conn: psycopg.Connection, name: str) -> int:
    """The generation the alias's next target gets (1 for a new alias)."""
    row = conn.execute(
        "SELECT coalesce(max(generation), 0) + 1 FROM alias_targets WHERE alias = %s", (name,)
    ).fetchone()
    return int(row[0])


def insert_target(
    conn: psycopg.Connection,
    name: str,
    generation: int,
    index_name: str,
    index_version: int,
    *,
    options: Mapping[str, Any],
    note: str,
    scores: Mapping[str, float],
    previous: int | None,
) -> None:
    """Add one target row (options and scores stored as JSON)."""
    conn.execute(
        "INSERT INTO alias_targets"
        " (alias, generation, index_name, index_version, options, note, scores, previous)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            name,
            generation,
            index_name,
            index_version,
            json.dumps(options),
            note,
            json.dumps(dict(scores)),
            previous,
        ),
    )


def point(conn: psycopg.Connection, name: str, generation: int) -> None:
    """Point the alias at its target `generation` (creating the alias row)."""
    conn.execute(
        "INSERT INTO aliases (name, generation) VALUES (%s, %s)"
        " ON CONFLICT (name) DO UPDATE SET generation = excluded.generation, updated_at = now()",
        (name, generation),
    )


def target_kept(conn: psycopg.Connection, name: str, generation: int) -> bool:
    """Whether the alias still keeps its target `generation` (retention may have dropped it)."""
    row = conn.execute(
        "SELECT 1 FROM alias_targets WHERE alias = %s AND generation = %s", (name, generation)
    ).fetchone()
    return row is not None


def delete_alias(conn: psycopg.Connection, name: str) -> int:
    """Delete the alias's pointer; the number of rows deleted (0: it did not exist)."""
    return conn.execute("DELETE FROM aliases WHERE name = %s", (name,)).rowcount


def delete_targets(conn: psycopg.Connection, name: str) -> list[tuple[str, int]]:
    """Delete every target of the alias; the (index name, version) each pinned."""
    rows = conn.execute(
        "DELETE FROM alias_targets WHERE alias = %s RETURNING index_name, index_version", (name,)
    ).fetchall()
    return [(index, int(version)) for index, version in rows]


def rollback_chain(conn: psycopg.Connection, name: str) -> dict[int, int | None]:
    """Each kept target's generation and the generation before it (None: the first)."""
    return {
        int(g): p
        for g, p in conn.execute("SELECT generation, previous FROM alias_targets WHERE alias = %s", (name,))
    }


def delete_targets_except(conn: psycopg.Connection, name: str, kept: list[int]) -> list[tuple[str, int]]:
    """Delete the alias's targets whose generation is not in `kept`; the (index name, version) each pinned."""
    rows = conn.execute(
        "DELETE FROM alias_targets WHERE alias = %s AND NOT (generation = ANY(%s))"
        " RETURNING index_name, index_version",
        (name, kept),
    ).fetchall()
    return [(index, int(version)) for index, version in rows]


# The SQL of alias snapshots (`retrieval.indexing.snapshots`): an index's published rows copied under a
# snapshot's name, and the pins that keep one. Each function runs in the caller's transaction.

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
