"""A collection's stored documents read against an index: text slices, texts by id, what the index lags behind."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg


def document_slice(
    conn: psycopg.Connection, collection: str, doc_id: str, start: int, end: int
) -> str | None:
    """The stored document's text[start:end]; None when the document is not stored."""
    row = conn.execute(
        "SELECT substr(text, %s, %s) FROM documents WHERE collection = %s AND doc_id = %s",
        (start + 1, end - start, collection, doc_id),
    ).fetchone()
    return None if row is None else row[0]


def document_texts(
    conn: psycopg.Connection, collection: str, doc_ids: Sequence[str]
) -> list[tuple[str, str]]:
    """(doc_id, text) of the stored documents among `doc_ids` (a missing one is left out)."""
    return conn.execute(
        "SELECT doc_id, text FROM documents WHERE collection = %s AND doc_id = ANY(%s)",
        (collection, list(doc_ids)),
    ).fetchall()


def changed_since_indexed(
    conn: psycopg.Connection, collection: str, index_name: str, excluded: Sequence[str]
) -> list[str]:
    """The index's documents, other than `excluded`, whose stored sha256 is no longer the one it was built
    from (or that are no longer stored), by id."""
    rows = conn.execute(
        "SELECT i.doc_id FROM index_documents i LEFT JOIN documents d"
        " ON d.collection = %s AND d.doc_id = i.doc_id"
        " WHERE i.index_name = %s AND NOT (i.doc_id = ANY(%s))"
        " AND d.sha256 IS DISTINCT FROM i.sha256 ORDER BY i.doc_id",
        (collection, index_name, list(excluded)),
    ).fetchall()
    return [doc_id for (doc_id,) in rows]


def unindexed_changes(
    conn: psycopg.Connection, index_name: str, collection: str
) -> list[tuple[str, bool, datetime]]:
    """Stored documents the index lacks or holds another version of, by id: (doc_id, missing from the
    index, the document's `updated_at`)."""
    return conn.execute(
        "SELECT d.doc_id, i.doc_id IS NULL, d.updated_at FROM documents d"
        " LEFT JOIN index_documents i ON i.index_name = %s AND i.doc_id = d.doc_id"
        " WHERE d.collection = %s AND (i.doc_id IS NULL OR i.sha256 <> d.sha256) ORDER BY d.doc_id",
        (index_name, collection),
    ).fetchall()


def deleted_since_indexed(conn: psycopg.Connection, index_name: str, collection: str) -> list[str]:
    """Documents the index still holds that are no longer stored, by id."""
    rows = conn.execute(
        "SELECT i.doc_id FROM index_documents i WHERE i.index_name = %s AND NOT EXISTS"
        " (SELECT 1 FROM documents d WHERE d.collection = %s AND d.doc_id = i.doc_id)"
        " ORDER BY i.doc_id",
        (index_name, collection),
    ).fetchall()
    return [doc_id for (doc_id,) in rows]
