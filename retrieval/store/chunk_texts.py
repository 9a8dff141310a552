"""Chunk texts by id, read inside the caller's transaction (a query's pseudo-relevance feedback)."""

from __future__ import annotations

import psycopg
from psycopg import sql


def chunk_texts(
    conn: psycopg.Connection, chunks_table: str, index_name: str, chunk_ids: list[str]
) -> dict[str, str]:
    """{chunk id: text} of the chunks of `index_name` (in its partition `chunks_table`) among `chunk_ids`."""
    if not chunk_ids:
        return {}
    rows = conn.execute(
        sql.SQL("SELECT chunk_id, text FROM {} WHERE index_name = %s AND chunk_id = ANY(%s)").format(
            sql.Identifier(chunks_table)
        ),
        (index_name, chunk_ids),
    ).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}
