"""Read-only SQL of the index steps' integrity checks, over the staged and the published tables.

Each step reads what its checks judge here, in one call per scope (`chunk_reads` of the chunks step,
`published_reads` of the publish; the embeddings step's `staged_embedding_counts`), before
`pipeline.checks` judges it: the counts come back read, the chunks to go through stream in batches
when judged. `staged_documents` (what a run re-chunked) and `sampled_chunks` (the chunks step's view of
a few documents) are the steps' other reads of the same tables.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import psycopg
from chunkyard.retrieval.store.documents import DocumentChunk
from chunkyard.retrieval.store.pool import Pool
from psycopg import sql

# The chunk tables a check reads: the staged chunks of a run (`staged`) or the published ones
# readers see (`published`).
CHUNK_TABLES = {"staged": "staged_chunks", "published": "chunks"}

SPAN_BATCH = 5000  # chunks fetched per round trip by the span check
EMBED_TEXT_BATCH = 2000  # chunks' embed texts per batch of the token check
SAMPLE = 10  # offending rows listed in a failed check's metadata

# A chunk's span and the text stored for it: (doc_id, start, end, text or embed_text).
SpanRow = tuple[str, int, int, str]


def _table(where: str) -> sql.Identifier:
    if where not in CHUNK_TABLES:
        raise ValueError(f"where: expected 'staged' or 'published', got {where!r}")
    return sql.Identifier(CHUNK_TABLES[where])


@dataclass(frozen=True)
class StagedDocuments:
    """The documents a run re-chunked (its staged chunks) and those it removes (staged removals), by id."""

    chunked: list[str]
    removed: list[str]


def staged_documents(pool: Pool, index_name: str) -> StagedDocuments:
    """Which documents this run re-chunked and which it removes (one connection, two reads)."""
    with pool.connection() as conn:
        chunked = conn.execute(
            "SELECT DISTINCT doc_id FROM staged_chunks WHERE index_name = %s ORDER BY doc_id", (index_name,)
        ).fetchall()
        removed = conn.execute(
            "SELECT doc_id FROM staged_removals WHERE index_name = %s ORDER BY doc_id", (index_name,)
        ).fetchall()
    return StagedDocuments([r[0] for r in chunked], [r[0] for r in removed])


@dataclass(frozen=True)
class ChunkSample:
    """A few documents' chunks, each document's in document order: the re-chunked documents' staged
    chunks (`source` "staged"), else the published index's ("published"), else none ("none").
    `documents` counts them all; `chunks` holds the first `shown` by id."""

    source: str
    documents: int
    chunks: dict[str, list[DocumentChunk]]


def sampled_chunks(pool: Pool, index_name: str, rechunked: Sequence[str], shown: int) -> ChunkSample:
    """The chunks of the first `shown` of `rechunked` (staged) or, when it is empty, of the published
    index's documents (by id): two reads at most."""
    with pool.connection() as conn:
        if rechunked:
            source, total, ids = "staged", len(rechunked), list(rechunked[:shown])
        else:
            row = conn.execute("SELECT version FROM indexes WHERE name = %s", (index_name,)).fetchone()
            if not (row and row[0]):  # never published
                return ChunkSample("none", 0, {})
            firsts = conn.execute(
                "SELECT doc_id, count(*) OVER () FROM (SELECT DISTINCT doc_id FROM chunks"
                " WHERE index_name = %s) d ORDER BY doc_id LIMIT %s",
                (index_name, shown),
            ).fetchall()
            source, total, ids = "published", int(firsts[0][1]) if firsts else 0, [r[0] for r in firsts]
        rows = conn.execute(
            sql.SQL(
                'SELECT doc_id, chunk_id, start, "end", text, metadata FROM {}'
                ' WHERE index_name = %s AND doc_id = ANY(%s) ORDER BY doc_id, start, "end"'
            ).format(_table(source)),
            (index_name, ids),
        ).fetchall()
    chunks: dict[str, list[DocumentChunk]] = {doc_id: [] for doc_id in ids}
    for doc_id, chunk_id, start, end, text, metadata in rows:
        chunks[doc_id].append(DocumentChunk(chunk_id, int(start), int(end), text, dict(metadata or {})))
    return ChunkSample(source, total, chunks)


@dataclass(frozen=True)
class SpanBatch:
    """Chunks in document order as (doc_id, start, end, text), with the stored text of their documents
    (a document no longer stored is absent)."""

    rows: list[SpanRow]
    texts: dict[str, str]


@dataclass(frozen=True)
class Spans:
    """What the span check of `where` reads: the chunks' batches (streamed once, when judged) and, when
    scoped to `doc_ids`, the index's other documents whose text changed since it was built from them."""

    where: str
    batches: Iterator[SpanBatch]
    doc_ids: Sequence[str] | None = None
    changed_since_indexed: list[str] = field(default_factory=list)


def spans(
    pool: Pool,
    collection: str,
    index_name: str,
    where: str,
    doc_ids: Sequence[str] | None = None,
    *,
    batch: int = SPAN_BATCH,
) -> Spans:
    """The span check's reads; `doc_ids` scopes the chunks read to those documents' (the documents
    changed since indexed are read now, the batches when iterated)."""
    changed = _changed_since_indexed(pool, collection, index_name, doc_ids) if doc_ids is not None else []
    return Spans(where, _span_batches(pool, collection, index_name, where, doc_ids, batch), doc_ids, changed)


def _span_batches(
    pool: Pool, collection: str, index_name: str, where: str, doc_ids: Sequence[str] | None, batch: int
) -> Iterator[SpanBatch]:
    """The chunks (only `doc_ids`' when given) in document order, `batch` at a time from a server-side
    cursor, each batch with its documents' texts read in one round trip (each document once: only the
    batch's last document can continue into the next, and its text is kept)."""
    scoped = doc_ids is not None
    query = sql.SQL(
        'SELECT doc_id, start, "end", text FROM {} WHERE index_name = %s{} ORDER BY doc_id, start, "end"'
    ).format(_table(where), sql.SQL(" AND doc_id = ANY(%s)") if scoped else sql.SQL(""))
    params: tuple[str] | tuple[str, list[str]] = (
        (index_name, list(doc_ids)) if doc_ids is not None else (index_name,)
    )
    with pool.connection() as conn, conn.transaction():
        texts: dict[str, str] = {}
        with conn.cursor(name="chunkyard_span_check") as cur:
            cur.itersize = batch
            cur.execute(query, params)
            while rows := cur.fetchmany(batch):
                texts = {d: t for d, t in texts.items() if d == rows[0][0]}
                wanted = sorted({r[0] for r in rows} - texts.keys())
                if wanted:
                    texts.update(_document_texts(conn, collection, wanted))
                yield SpanBatch(rows, texts)


def _document_texts(
    conn: psycopg.Connection, collection: str, doc_ids: Sequence[str]
) -> list[tuple[str, str]]:
    """(doc_id, text) of the stored documents among `doc_ids` (a missing one is left out)."""
    return conn.execute(
        "SELECT doc_id, text FROM documents WHERE collection = %s AND doc_id = ANY(%s)",
        (collection, list(doc_ids)),
    ).fetchall()


def _changed_since_indexed(
    pool: Pool, collection: str, index_name: str, excluded: Sequence[str]
) -> list[str]:
    """The index's documents, other than `excluded`, whose stored sha256 is no longer the one it was built
    from (or that are no longer stored), by id."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT i.doc_id FROM index_documents i LEFT JOIN documents d"
            " ON d.collection = %s AND d.doc_id = i.doc_id"
            " WHERE i.index_name = %s AND NOT (i.doc_id = ANY(%s))"
            " AND d.sha256 IS DISTINCT FROM i.sha256 ORDER BY i.doc_id",
            (collection, index_name, list(excluded)),
        ).fetchall()
    return [doc_id for (doc_id,) in rows]


@dataclass(frozen=True)
class EmptyChunks:
    """The chunks of `where`, how many are empty or whitespace only, and up to `SAMPLE` of those as
    (doc_id, start, end)."""

    where: str
    chunks: int
    empty: int
    examples: list[tuple[str, int, int]]


def empty_chunks(pool: Pool, index_name: str, where: str) -> EmptyChunks:
    """The chunks and the empty ones (text or embed_text), with a few of them when there are any."""
    table = _table(where)
    blank = "(text ~ '^\\s*$' OR embed_text ~ '^\\s*$')"
    with pool.connection() as conn:
        total, empty = conn.execute(
            sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE " + blank + ") FROM {} WHERE index_name = %s"
            ).format(table),
            (index_name,),
        ).fetchone()
        examples = []
        if empty:
            examples = conn.execute(
                sql.SQL(
                    'SELECT doc_id, start, "end" FROM {} WHERE index_name = %s AND ' + blank + " LIMIT %s"
                ).format(table),
                (index_name, SAMPLE),
            ).fetchall()
    return EmptyChunks(where, int(total), int(empty), examples)


@dataclass(frozen=True)
class EmbedTexts:
    """The chunks of `where` as (doc_id, start, end, embed_text) by chunk id, in batches (streamed once,
    when judged)."""

    where: str
    batches: Iterator[list[SpanRow]]


def embed_texts(pool: Pool, index_name: str, where: str, *, batch: int = EMBED_TEXT_BATCH) -> EmbedTexts:
    """The token check's read: the chunks' embed texts, read `batch` at a time when iterated."""
    return EmbedTexts(where, _embed_text_batches(pool, index_name, _table(where), batch))


def _embed_text_batches(
    pool: Pool, index_name: str, table: sql.Identifier, batch: int
) -> Iterator[list[SpanRow]]:
    with pool.connection() as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL(
                'SELECT doc_id, start, "end", embed_text FROM {} WHERE index_name = %s ORDER BY chunk_id'
            ).format(table),
            (index_name,),
        )
        while rows := cur.fetchmany(batch):
            yield rows


@dataclass(frozen=True)
class ChunkReads:
    """What the chunks step's checks judge: the staged chunks' spans, and the empty chunks and the
    embed texts of `where` (the published chunks when the run re-chunked nothing)."""

    spans: Spans
    empty: EmptyChunks
    embed_texts: EmbedTexts


def chunk_reads(pool: Pool, collection: str, index_name: str, where: str) -> ChunkReads:
    """The chunks step's reads: the counts now, the chunks to go through when judged."""
    return ChunkReads(
        spans(pool, collection, index_name, "staged"),
        empty_chunks(pool, index_name, where),
        embed_texts(pool, index_name, where),
    )


@dataclass(frozen=True)
class StagedEmbeddingCounts:
    """Staged chunks, those without a staged vector, staged vectors, and those not of `expected_dims`."""

    chunks: int
    chunks_without_vector: int
    vectors: int
    vectors_with_wrong_dims: int
    expected_dims: int


def staged_embedding_counts(pool: Pool, index_name: str, dim: int) -> StagedEmbeddingCounts:
    """The embeddings step's read: the staged chunks and vectors against the model's `dim` (one read)."""
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM staged_chunks WHERE index_name = %(index)s),"
            " (SELECT count(*) FROM staged_chunks c LEFT JOIN staged_embeddings e"
            "  ON e.index_name = c.index_name AND e.chunk_id = c.chunk_id"
            "  WHERE c.index_name = %(index)s AND e.chunk_id IS NULL),"
            " count(*), count(*) FILTER (WHERE vector_dims(embedding) <> %(dim)s)"
            " FROM staged_embeddings WHERE index_name = %(index)s",
            {"index": index_name, "dim": dim},
        ).fetchone()
    return StagedEmbeddingCounts(*(int(value) for value in row), int(dim))


@dataclass(frozen=True)
class PublishedEmbeddingCounts:
    """Published chunks (only `doc_ids`' when `scoped`), those without a vector, those whose vector is not
    of `expected_dims`, and how many distinct dimensions the vectors have."""

    chunks: int
    chunks_without_vector: int
    vectors_with_wrong_dims: int
    distinct_dims: int
    expected_dims: int
    scoped: bool


def published_embedding_counts(
    pool: Pool, index_name: str, dim: int, doc_ids: Sequence[str] | None = None
) -> PublishedEmbeddingCounts:
    """The published chunks' vectors against `dim` (0: any single dimension), only `doc_ids`' when given."""
    scope = sql.SQL(" AND doc_id = ANY(%s)") if doc_ids is not None else sql.SQL("")
    params: tuple[int | str | list[str], ...] = (dim, dim, index_name) + (
        (list(doc_ids),) if doc_ids is not None else ()
    )
    with pool.connection() as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE embedding IS NULL),"
                " count(*) FILTER (WHERE embedding IS NOT NULL AND %s > 0 AND vector_dims(embedding) <> %s),"
                " count(DISTINCT vector_dims(embedding))"
                " FROM chunks WHERE index_name = %s{}"
            ).format(scope),
            params,
        ).fetchone()
    return PublishedEmbeddingCounts(*(int(value) for value in row), int(dim), doc_ids is not None)


@dataclass(frozen=True)
class Bm25Counts:
    """The published chunks, those with terms and their summed BM25 length, against the BM25 statistics'
    document count and total length."""

    chunks: int
    chunks_with_terms: int
    chunks_total_length: int
    bm25_documents: int | None  # None: the index has no BM25 statistics
    bm25_total_length: int | None


def bm25_counts(pool: Pool, index_name: str) -> Bm25Counts:
    """The published chunks' count, those with terms and their summed BM25 length, against the BM25
    statistics' document count and total length (one scan)."""
    with pool.connection() as conn:
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


@dataclass(frozen=True)
class PublishedReads:
    """What the publish step's checks judge: the published spans (of `doc_ids` when given), the vectors
    (of `vector_scope` when given) and the BM25 sizes."""

    spans: Spans
    embeddings: PublishedEmbeddingCounts
    bm25: Bm25Counts


def published_reads(
    pool: Pool,
    collection: str,
    index_name: str,
    dim: int,
    *,
    doc_ids: Sequence[str] | None = None,
    vector_scope: Sequence[str] | None = None,
) -> PublishedReads:
    """The publish step's reads: the counts now, the chunks whose spans to check when judged."""
    return PublishedReads(
        spans(pool, collection, index_name, "published", doc_ids),
        published_embedding_counts(pool, index_name, dim, vector_scope),
        bm25_counts(pool, index_name),
    )
