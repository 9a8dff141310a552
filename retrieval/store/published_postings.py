"""What context scoring reads from an index's published BM25 postings and terms, in the caller's transaction."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from chunkyard.retrieval.store.bm25 import binary_copy_int4_rows
from chunkyard.retrieval.store.published_chunks import LAYOUT_ORDER, copy_bytes
from psycopg import sql


def terms_with_df(conn: psycopg.Connection, index_name: str) -> list[tuple[str, int]]:
    """Every term of the index with its document frequency, by term (a term's id is its position)."""
    return conn.execute(
        "SELECT term, df FROM bm25_terms WHERE index_name = %s ORDER BY term", (index_name,)
    ).fetchall()


def postings_by_position(
    conn: psycopg.Connection, index_name: str, postings_partition: str, chunks_partition: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every posting as (term id, chunk's layout position, tf), int64 arrays in no order (one binary COPY).

    Term ids are positions in `terms_with_df`; layout positions follow `LAYOUT_ORDER`.
    """
    query = sql.SQL(
        "COPY (SELECT t.ti::int4, c.ci::int4, p.tf FROM {postings} p"
        " JOIN (SELECT chunk_id, row_number() OVER ({order}) - 1 AS ci FROM {chunks}) c"
        " ON c.chunk_id = p.chunk_id"
        " JOIN (SELECT term, row_number() OVER (ORDER BY term) - 1 AS ti FROM bm25_terms"
        " WHERE index_name = {name}) t ON t.term = p.term) TO STDOUT (FORMAT BINARY)"
    ).format(
        postings=sql.Identifier(postings_partition),
        chunks=sql.Identifier(chunks_partition),
        order=LAYOUT_ORDER,
        name=sql.Literal(str(index_name)),
    )
    records = binary_copy_int4_rows(copy_bytes(conn, query), 3)
    term_index, rows, tf = (records[f"v{i}"].astype(np.int64) for i in range(3))
    return term_index, rows, tf


def queue_term_frequencies(
    conn: psycopg.Connection,
    index_name: str,
    postings_partition: str,
    terms: list[str],
    chunk_ids: list[str],
) -> psycopg.Cursor[Any]:
    """Cursor of (chunk_id, term, tf) for the `terms` in the chunks `chunk_ids`."""
    return conn.execute(
        sql.SQL(
            "SELECT chunk_id, term, tf FROM {} WHERE index_name = %s AND term = ANY(%s) AND chunk_id = ANY(%s)"
        ).format(sql.Identifier(postings_partition)),
        (index_name, terms, chunk_ids),
    )
