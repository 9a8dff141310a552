"""A document's chunks in an index, published or staged, in document order: where it was cut."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store.partitions import partition_names
from chunkyard.retrieval.store.pool import Pool
from psycopg import sql


@dataclass(frozen=True)
class DocumentChunk:
    """A published chunk: its exact span of the document, its text and metadata (pages, slides, headings)."""

    chunk_id: str
    start: int
    end: int
    text: str
    metadata: dict[str, Any]


def published_version(pool: Pool, index: IndexName) -> int | None:
    """The index's published version; None when it does not exist or was never published."""
    with pool.connection() as conn:
        try:
            row = conn.execute("SELECT version FROM indexes WHERE name = %s", (str(index),)).fetchone()
        except psycopg.errors.UndefinedTable:  # a database no index was built in: no tables yet
            return None
    return int(row[0]) if row and row[0] else None


def document_chunks(pool: Pool, index: IndexName, doc_id: str) -> list[DocumentChunk]:
    """`doc_id`'s chunks in `index` as published, by start offset (empty: not in the index)."""
    table = sql.Identifier(partition_names(str(index))["chunks"])
    query = sql.SQL(
        'SELECT chunk_id, start, "end", text, metadata FROM {} WHERE index_name = %s AND doc_id = %s'
        ' ORDER BY start, "end"'
    ).format(table)
    with pool.connection() as conn:
        rows = conn.execute(query, (str(index), doc_id)).fetchall()
    return [DocumentChunk(r[0], int(r[1]), int(r[2]), r[3], dict(r[4] or {})) for r in rows]


def document_ids(pool: Pool, index: IndexName) -> list[str]:
    """Every document id with a chunk in `index`, sorted (to suggest the one a user meant)."""
    table = sql.Identifier(partition_names(str(index))["chunks"])
    query = sql.SQL("SELECT DISTINCT doc_id FROM {} WHERE index_name = %s ORDER BY doc_id").format(table)
    with pool.connection() as conn:
        return [r[0] for r in conn.execute(query, (str(index),)).fetchall()]


def staged_document_chunks(pool: Pool, index: IndexName, doc_id: str) -> list[DocumentChunk]:
    """`doc_id`'s chunks staged for `index`'s next publish (a run's chunks step), by start offset."""
    query = (
        'SELECT chunk_id, start, "end", text, metadata FROM staged_chunks'
        ' WHERE index_name = %s AND doc_id = %s ORDER BY start, "end"'
    )
    with pool.connection() as conn:
        rows = conn.execute(query, (str(index), doc_id)).fetchall()
    return [DocumentChunk(r[0], int(r[1]), int(r[2]), r[3], dict(r[4] or {})) for r in rows]
