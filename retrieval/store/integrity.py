"""Read-only SQL of the index steps' integrity checks, over the staged and the published tables."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import psycopg
from psycopg import sql

# `pipeline.checks` judges what these return. `table` is one of `CHUNK_TABLES`' values: the staged
# chunks of a run (`staged_chunks`) or the published ones readers see (`chunks`).
CHUNK_TABLES = {"staged": "staged_chunks", "published": "chunks"}

# A chunk's span and the text stored for it: (doc_id, start, end, text or embed_text).
SpanRow = tuple[str, int, int, str]


class EmptyChunks(NamedTuple):
    chunks: int
    empty: int


class StagedEmbeddingCounts(NamedTuple):
    chunks: int
    chunks_without_vector: int
    vectors: int
    vectors_with_wrong_dims: int


class PublishedEmbeddingCounts(NamedTuple):
    chunks: int
    chunks_without_vector: int
    vectors_with_wrong_dims: int
    distinct_dims: int


class Bm25Counts(NamedTuple):
    chunks: int
    chunks_with_terms: int
    chunks_total_length: int
    bm25_documents: int | None  # None: the index has no BM25 statistics
    bm25_total_length: int | None


def span_batches(
    conn: psycopg.Connection,
    table: str,
    index_name: str,
    doc_ids: Sequence[str] | None,
    batch: int,
    cursor_name: str = "chunkyard_span_check",
) -> Iterator[list[SpanRow]]:
    """The index's chunks (only `doc_ids`' when given) as (doc_id, start, end, text), in document order,
    `batch` rows at a time from a server-side cursor (call it inside the caller's transaction)."""
    scoped = doc_ids is not None
    query = sql.SQL(
        'SELECT doc_id, start, "end", text FROM {} WHERE index_name = %s{} ORDER BY doc_id, start, "end"'
    ).format(sql.Identifier(table), sql.SQL(" AND doc_id = ANY(%s)") if scoped else sql.SQL(""))
    params: tuple[str] | tuple[str, list[str]] = (
        (index_name, list(doc_ids)) if doc_ids is not None else (index_name,)
    )
    with conn.cursor(name=cursor_name) as cur:
        cur.itersize = batch
        cur.execute(query, params)
        while rows := cur.fetchmany(batch):
            yield rows


def empty_chunks(conn: psycopg.Connection, table: str, index_name: str) -> EmptyChunks:
    """The index's chunks, and how many are empty or whitespace only (text or embed_text)."""
    total, empty = conn.execute(
        sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE text ~ '^\\s*$' OR embed_text ~ '^\\s*$')"
            " FROM {} WHERE index_name = %s"
        ).format(sql.Identifier(table)),
        (index_name,),
    ).fetchone()
    return EmptyChunks(int(total), int(empty))


def empty_chunk_spans(
    conn: psycopg.Connection, table: str, index_name: str, limit: int
) -> list[tuple[str, int, int]]:
    """Up to `limit` empty or whitespace-only chunks as (doc_id, start, end)."""
    return conn.execute(
        sql.SQL(
            'SELECT doc_id, start, "end" FROM {}'
            " WHERE index_name = %s AND (text ~ '^\\s*$' OR embed_text ~ '^\\s*$') LIMIT %s"
        ).format(sql.Identifier(table)),
        (index_name, limit),
    ).fetchall()


def embed_text_batches(
    conn: psycopg.Connection, table: str, index_name: str, batch: int
) -> Iterator[list[SpanRow]]:
    """The index's chunks as (doc_id, start, end, embed_text) by chunk id, `batch` rows at a time."""
    with conn.cursor() as cur:
        cur.execute(
            sql.SQL(
                'SELECT doc_id, start, "end", embed_text FROM {} WHERE index_name = %s ORDER BY chunk_id'
            ).format(sql.Identifier(table)),
            (index_name,),
        )
        while rows := cur.fetchmany(batch):
            yield rows


def staged_embedding_counts(conn: psycopg.Connection, index_name: str, dim: int) -> StagedEmbeddingCounts:
    """Staged chunks, those without a staged vector, staged vectors, and those not of `dim` dimensions."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM staged_chunks WHERE index_name = %(index)s),"
        " (SELECT count(*) FROM staged_chunks c LEFT JOIN staged_embeddings e"
        "  ON e.index_name = c.index_name AND e.chunk_id = c.chunk_id"
        "  WHERE c.index_name = %(index)s AND e.chunk_id IS NULL),"
        " count(*), count(*) FILTER (WHERE vector_dims(embedding) <> %(dim)s)"
        " FROM staged_embeddings WHERE index_name = %(index)s",
        {"index": index_name, "dim": dim},
    ).fetchone()
    return StagedEmbeddingCounts(*(int(value) for value in row))


def published_embedding_counts(
    conn: psycopg.Connection, index_name: str, dim: int, doc_ids: Sequence[str] | None = None
) -> PublishedEmbeddingCounts:
    """Published chunks (only `doc_ids`' when given), those without a vector, those whose vector is not
    of `dim` dimensions, and how many distinct dimensions the vectors have."""
    scope = sql.SQL(" AND doc_id = ANY(%s)") if doc_ids is not None else sql.SQL("")
    params: tuple[int | str | list[str], ...] = (dim, dim, index_name) + (
        (list(doc_ids),) if doc_ids is not None else ()
    )
    row = conn.execute(
        sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE embedding IS NULL),"
            " count(*) FILTER (WHERE embedding IS NOT NULL AND %s > 0 AND vector_dims(embedding) <> %s),"
            " count(DISTINCT vector_dims(embedding))"
            " FROM chunks WHERE index_name = %s{}"
        ).format(scope),
        params,
    ).fetchone()
    return PublishedEmbeddingCounts(*(int(value) for value in row))


def bm25_counts(conn: psycopg.Connection, index_name: str) -> Bm25Counts:
    """The published chunks' count, those with terms and their summed BM25 length, against the BM25
    statistics' document count and total length (one scan)."""
    chunks, with_length, length, n_docs, total_length = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE bm25_length > 0), coalesce(sum(bm25_length), 0),"
        " (SELECT n_docs FROM bm25_stats WHERE index_name = %(index)s),"
        " (SELECT total_length FROM bm25_stats WHERE index_name = %(index)s)"
        " FROM chunks WHERE index_name = %(index)s",
        {"index": index_name},
    ).fetchone()
    return Bm25Counts(
        int(chunks),
        int(with_length),
        int(length),
        None if n_docs is None else int(n_docs),
        None if total_length is None else int(total_length),
    )


def staged_chunked_documents(conn: psycopg.Connection, index_name: str) -> list[str]:
    """The documents with staged chunks (what this run re-chunked), by id."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT doc_id FROM staged_chunks WHERE index_name = %s ORDER BY doc_id", (index_name,)
        )
    ]


def staged_removed_documents(conn: psycopg.Connection, index_name: str) -> list[str]:
    """The documents this run removes from the index (staged removals), by id."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT doc_id FROM staged_removals WHERE index_name = %s ORDER BY doc_id", (index_name,)
        )
    ]
