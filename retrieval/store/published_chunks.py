"""What a search reads from an index's published chunks: the read lock, rows, nearest vectors, texts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
from psycopg import Connection, sql
from psycopg.types.json import Jsonb

# A search's read transaction, and the lock it takes before its snapshot so a partition swap lands wholly before or after it.
#
# A large full build is published by swapping a new partition in (`published.apply`). Table
# DDL is not MVCC: a REPEATABLE READ reader whose snapshot predates the swap's commit, but which opens
# the partition after it, would find the new table and none of its rows (their writer is not in its
# snapshot). Dropping a partition takes an ACCESS EXCLUSIVE lock on the partitioned `chunks` table,
# so a reader that locks `chunks` (itself only, ACCESS SHARE) before its first query either finishes
# before the swap or starts its snapshot after the swap commits (PostgreSQL's documented way: LOCK
# TABLE before the first statement of a REPEATABLE READ transaction). The lock is one statement
# pipelined with the reader's others; it waits only while a swap holds `chunks` (milliseconds).
READ_LOCK = "LOCK TABLE ONLY chunks IN ACCESS SHARE MODE"


def lock_for_read(conn: Connection) -> None:
    """Take the read lock in the caller's transaction; call it before the transaction's first query."""
    conn.execute(READ_LOCK)


def begin_read(conn: Connection) -> None:
    """Open a search's read transaction (REPEATABLE READ, read only) and take the read lock first;
    pipelined with the caller's next statements when the caller is in a pipeline."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    lock_for_read(conn)


def read_snapshot(conn: Connection) -> None:
    """Make the caller's open transaction a read one (REPEATABLE READ, read only) and take the read lock."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
    lock_for_read(conn)


def end_read(conn: Connection) -> None:
    """Commit a read transaction opened with `begin_read` (pipelined like it)."""
    conn.execute("COMMIT")


def abandon(conn: Connection) -> None:
    """Roll back whatever transaction the connection is in (after an error or an early exit)."""
    conn.execute("ROLLBACK")


# What a search reads from an index's published chunk partition: rows, layout, vectors, texts, costs.
#
# Every function runs in the caller's connection (and so in its read transaction); a `queue_*`
# function only sends its statement and returns the cursor, so the caller can pipeline it with
# others and fetch after the pipeline. Partitions are named by `store.indexes.partition_names`.

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


# Nearest published chunks by cosine in SQL: through an index's HNSW graph (pgvector) or by an exact scan.
#
# Queries go to the index's own partition; the graph query orders by the expression its HNSW index
# is built on (`embedding::vector(d)` or `embedding::halfvec(d)`), so the planner uses that graph.
# Every function runs in the caller's connection (its read transaction); values are parameters.

# One nearest chunk: its id and its cosine distance to the query (float32 vectors).
Nearest = tuple[str, float]


def _where(filters: dict[str, Any] | None) -> sql.Composable:
    return sql.SQL(" WHERE metadata @> %(filters)s") if filters else sql.SQL("")


def graph_nearest(
    conn: psycopg.Connection,
    chunks_partition: str,
    dim: int,
    storage: str,
    query_vector: np.ndarray,
    fetch: int,
    filters: dict[str, Any] | None,
    *,
    ef_search: int,
    iterative_scan: str,
    max_scan_tuples: int,
) -> list[Nearest]:
    """At most `fetch` chunks in the order of the partition's graph (`storage(dim)`), with their exact
    distance, in one round trip with the scan's settings (`SET LOCAL`: the caller's transaction).

    `iterative_scan` is `hnsw.iterative_scan` (`off` sends neither it nor `hnsw.max_scan_tuples`).
    """
    exact_type = sql.SQL("vector({})").format(sql.Literal(dim))
    graph_type = sql.SQL("{}({})").format(sql.SQL(storage), sql.Literal(dim))
    params: dict[str, Any] = {"q": np.asarray(query_vector, dtype=np.float32), "n": fetch}
    if filters:
        params["filters"] = Jsonb(filters)
    query = sql.SQL(
        "SELECT chunk_id, (embedding::{e}) <=> %(q)s::{e} AS distance FROM {part}{where}"
        " ORDER BY (embedding::{g}) <=> %(q)s::{g} LIMIT %(n)s"
    ).format(e=exact_type, g=graph_type, part=sql.Identifier(chunks_partition), where=_where(filters))
    with conn.pipeline():  # one round trip for the settings and the query
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef_search)))
        if iterative_scan != "off":
            conn.execute(sql.SQL("SET LOCAL hnsw.iterative_scan = {}").format(sql.Literal(iterative_scan)))
            conn.execute(sql.SQL("SET LOCAL hnsw.max_scan_tuples = {}").format(sql.Literal(max_scan_tuples)))
        cursor = conn.execute(query, params)
    return cursor.fetchall()


def count_matching(conn: psycopg.Connection, chunks_partition: str, filters: dict[str, Any] | None) -> int:
    """How many chunks of the partition match `filters` (every chunk without)."""
    params: dict[str, Any] = {"filters": Jsonb(filters)} if filters else {}
    return conn.execute(
        sql.SQL("SELECT count(*) FROM {part}{where}").format(
            part=sql.Identifier(chunks_partition), where=_where(filters)
        ),
        params,
    ).fetchone()[0]


def exact_nearest(
    conn: psycopg.Connection,
    chunks_partition: str,
    dim: int,
    query_vector: np.ndarray,
    n: int,
    filters: dict[str, Any] | None,
) -> list[Nearest]:
    """The n nearest (matching) chunks and their distance by an exact scan of every vector, never the graph."""
    vector_type = sql.SQL("vector({})").format(sql.Literal(dim))
    params: dict[str, Any] = {"q": np.asarray(query_vector, dtype=np.float32), "n": n}
    if filters:
        params["filters"] = Jsonb(filters)
    exact = sql.SQL(
        "SELECT chunk_id, embedding <=> %(q)s::{t} AS distance FROM {part}{where} ORDER BY 2 LIMIT %(n)s"
    ).format(t=vector_type, part=sql.Identifier(chunks_partition), where=_where(filters))
    return conn.execute(exact, params).fetchall()


# Chunk texts by id, read inside the caller's transaction (a query's pseudo-relevance feedback).
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
