"""What a search reads from an index's published chunk partition: rows, layout, vectors, texts, costs.

Every function runs in the caller's connection (and so in its read transaction); a `queue_*`
function only sends its statement and returns the cursor, so the caller can pipeline it with
others and fetch after the pipeline. Partitions are named by `store.partitions.partition_names`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

# The order every in-memory layout of an index version follows (`query.context.layout.ChunkLayout`).
LAYOUT_ORDER = sql.SQL("ORDER BY doc_id, start, chunk_id")

# One chunk in layout order: id, document, start, BM25 length, parent id ('' for none), and 64 bits
# of the md5 of its text (equal for identical texts).
LayoutRow = tuple[str, str, int, int, str, int]

# Documents whose file failed to load after they were indexed keep serving their last good
# version (a transient read error must not drop them); their failure says why they may be stale.
# A failure keyed by a folder (several-folder collections) covers every document under it.
_STALE = sql.SQL(
    "SELECT c.doc_id, f.reason FROM (SELECT DISTINCT doc_id FROM {chunks}"
    " WHERE index_name = %s AND chunk_id = ANY(%s)) c"
    " JOIN document_failures f ON f.collection = %s"
    " AND (f.path = c.doc_id OR left(c.doc_id, length(f.path) + 1) = f.path || '/')"
)


def layout_rows(conn: psycopg.Connection, chunks_partition: str) -> list[LayoutRow]:
    """Every chunk of the partition in layout order (see `LayoutRow`)."""
    return conn.execute(
        sql.SQL(
            "SELECT chunk_id, doc_id, start, bm25_length, coalesce(parent_id, ''),"
            " ('x' || left(md5(text), 16))::bit(64)::bigint FROM {} {}"
        ).format(sql.Identifier(chunks_partition), LAYOUT_ORDER)
    ).fetchall()


def vectors_in_layout_order(conn: psycopg.Connection, chunks_partition: str, dim: int) -> np.ndarray:
    """Every chunk vector in layout order, as an (n x dim) float32 array (one binary COPY)."""
    query = sql.SQL(
        "COPY (SELECT embedding::vector({dim}) FROM {chunks} {order}) TO STDOUT (FORMAT BINARY)"
    ).format(
        dim=sql.Literal(dim),
        chunks=sql.Identifier(chunks_partition),
        order=LAYOUT_ORDER,
    )
    return _binary_copy_vectors(copy_bytes(conn, query), dim)


def embed_texts_in_layout_order(conn: psycopg.Connection, chunks_partition: str) -> Iterator[str]:
    """Every chunk's `embed_text` (what was embedded and analysed), in layout order."""
    query = sql.SQL("SELECT embed_text FROM {} {}").format(sql.Identifier(chunks_partition), LAYOUT_ORDER)
    for (text,) in conn.execute(query):
        yield text


def queue_embed_texts(
    conn: psycopg.Connection, index_name: str, chunks_partition: str, chunk_ids: list[str]
) -> psycopg.Cursor[Any]:
    """Cursor of (chunk_id, embed_text) for the chunks `chunk_ids`."""
    return conn.execute(
        sql.SQL("SELECT chunk_id, embed_text FROM {} WHERE index_name = %s AND chunk_id = ANY(%s)").format(
            sql.Identifier(chunks_partition)
        ),
        (index_name, chunk_ids),
    )


def queue_context_cosines(
    conn: psycopg.Connection,
    index_name: str,
    chunks_partition: str,
    dim: int,
    query_vector: np.ndarray,
    anchors: list[str],
    members: list[str],
) -> psycopg.Cursor[Any]:
    """Cursor of (anchor, cosine of the query with the mean vector of the anchor's members).

    `anchors` and `members` are parallel: member k belongs to the context of anchors[k].
    """
    vector_type = sql.SQL("vector({})").format(sql.Literal(int(dim)))
    return conn.execute(
        sql.SQL(
            "SELECT a.anchor, 1 - (avg(c.embedding::{t}) <=> %s::{t}) FROM"
            " unnest(%s::text[], %s::text[]) AS a(anchor, member)"
            " JOIN {part} c ON c.index_name = %s AND c.chunk_id = a.member GROUP BY a.anchor"
        ).format(t=vector_type, part=sql.Identifier(chunks_partition)),
        (np.asarray(query_vector, dtype=np.float32), anchors, members, index_name),
    )


def queue_rows(
    conn: psycopg.Connection,
    index_name: str,
    chunks_partition: str,
    chunk_ids: list[str],
    *,
    with_vectors: bool,
) -> psycopg.Cursor[Any]:
    """Cursor of the chunks' (chunk_id, doc_id, start, end, text, metadata, parent_id[, embedding])."""
    columns = sql.SQL('chunk_id, doc_id, start, "end", text, metadata, parent_id')
    if with_vectors:
        columns = columns + sql.SQL(", embedding")
    return conn.execute(
        sql.SQL("SELECT {} FROM {} WHERE index_name = %s AND chunk_id = ANY(%s)").format(
            columns, sql.Identifier(chunks_partition)
        ),
        (index_name, chunk_ids),
    )


def queue_stale_documents(
    conn: psycopg.Connection, index_name: str, chunks_partition: str, chunk_ids: list[str], collection: str
) -> psycopg.Cursor[Any]:
    """Cursor of (doc_id, reason) for the chunks' documents whose file failed to load since."""
    return conn.execute(
        _STALE.format(chunks=sql.Identifier(chunks_partition)), (index_name, chunk_ids, collection)
    )


def partition_exists(conn: psycopg.Connection, partition: str) -> bool:
    """Whether the partition table exists (an index never published has none)."""
    return conn.execute("SELECT to_regclass(%s)", (partition,)).fetchone()[0] is not None


def spans_and_embed_texts(conn: psycopg.Connection, chunks_partition: str) -> list[tuple[str, int, int, str]]:
    """Every chunk's (doc_id, start, end, embed_text), in no particular order."""
    return conn.execute(
        sql.SQL('SELECT doc_id, start, "end", embed_text FROM {}').format(sql.Identifier(chunks_partition))
    ).fetchall()


def partition_bytes(conn: psycopg.Connection, partition: str) -> int | None:
    """The partition's size on disk with its indexes and TOAST (`pg_total_relation_size`)."""
    return conn.execute("SELECT pg_total_relation_size(%s)", (partition,)).fetchone()[0]


def copy_bytes(conn: psycopg.Connection, query: sql.Composable) -> bytes:
    """The whole output of a `COPY ... TO STDOUT` statement."""
    buffer = bytearray()
    with conn.cursor() as cur, cur.copy(query) as copy:
        for block in copy:
            buffer += block
    return bytes(buffer)


def _binary_copy_vectors(data: bytes, dim: int) -> np.ndarray:
    """Parse binary COPY output of one non-null pgvector `vector(dim)` column into an (n x dim) array."""
    if not data.startswith(b"PGCOPY\n\xff\r\n\x00"):
        raise ValueError("not a Postgres binary COPY stream")
    extension = int.from_bytes(data[15:19], "big")
    body = data[19 + extension : len(data) - 2]
    fields = [("count", ">i2"), ("len", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("x", ">f4", (dim,))]
    records = np.frombuffer(body, dtype=np.dtype(fields))
    if records.size and (np.any(records["count"] != 1) or np.any(records["dim"] != dim)):
        raise ValueError("unexpected row layout in binary COPY stream (a chunk without a vector?)")
    return records["x"].astype(np.float32)
