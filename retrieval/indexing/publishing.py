"""Incremental indexing: stage chunks, vectors and term frequencies, then publish in one transaction.

Each function is what one Dagster asset calls. Staging lives in Postgres (`staged_*` tables), so
the steps can run in different processes; `publish` applies removals, new chunks, vectors,
postings and BM25 statistics in a single transaction and bumps the index version, so a reader
sees the old index or the new one, never a mix.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from chunking.types import Chunk, Document
from retrieval.bm25 import build_analyzer, refresh_stats
from retrieval.store import Store, partition_names

EMBED_BATCH = 256  # texts per embedding + cache round trip (a crash loses at most one batch)
CHUNK_DOC_BATCH = 64  # documents per chunker call
HNSW_MAX_DIM = 2000  # pgvector's limit for an HNSW index on `vector`


class IndexingError(RuntimeError):
    """Staging or publishing cannot go on; the message says which step to (re)run."""


def _metadata(obj: Any) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for key, value in asdict(obj).items():
        if isinstance(value, bool):
            out[key] = int(value)
        elif isinstance(value, int | float | str):
            out[key] = value
        elif isinstance(value, dict):
            for sub_key, sub_value in value.items():
                if isinstance(sub_value, int | float | str) and not isinstance(sub_value, bool):
                    out.setdefault(sub_key, sub_value)
    return out


@dataclass
class ChunkStageReport:
    index: str
    documents_added: int = 0
    documents_changed: int = 0
    documents_deleted: int = 0
    documents_unchanged: int = 0
    chunks_staged: int = 0
    chunks_kept: int = 0
    chunks_to_delete: int = 0
    duplicate_chunks_dropped: int = 0
    chunks_precomputed_embeddings: int = 0
    full_rebuild: bool = False
    seconds: float = 0.0

    def as_metadata(self) -> dict[str, int | float | str]:
        return _metadata(self)


@dataclass
class EmbeddingStageReport:
    index: str
    model_id: str = ""
    chunks: int = 0
    embeddings_computed: int = 0
    embeddings_reused: int = 0
    embeddings_precomputed: int = 0
    chunks_longer_than_model_limit: int = 0
    model_max_tokens: int = 0
    seconds: float = 0.0
    embeddings_per_second: float = 0.0

    def as_metadata(self) -> dict[str, int | float | str]:
        return _metadata(self)


@dataclass
class Bm25StageReport:
    index: str
    analyzer: str = ""
    chunks_analyzed: int = 0
    postings_staged: int = 0
    distinct_terms_staged: int = 0
    seconds: float = 0.0

    def as_metadata(self) -> dict[str, int | float | str]:
        return _metadata(self)


@dataclass
class PublishReport:
    index: str
    version: int = 0
    published: bool = False
    chunks_inserted: int = 0
    chunks_deleted: int = 0
    chunks_total: int = 0
    documents_total: int = 0
    bm25_vocabulary: int = 0
    hnsw_built: bool = False
    seconds: float = 0.0
    staged: dict[str, Any] = field(default_factory=dict)

    def as_metadata(self) -> dict[str, int | float | str]:
        return _metadata(self)


def _merge_stage_report(conn: Any, index_name: str, values: dict[str, Any]) -> None:
    conn.execute(
        "UPDATE staged_runs SET report = report || %s WHERE index_name = %s",
        (Jsonb(values), index_name),
    )


def _clear_staging(conn: Any, index_name: str, tables: tuple[str, ...] | None = None) -> None:
    for table in tables or (
        "staged_chunks",
        "staged_embeddings",
        "staged_bm25",
        "staged_bm25_lengths",
        "staged_removals",
        "staged_documents",
        "staged_runs",
    ):
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE index_name = %s").format(sql.Identifier(table)), (index_name,)
        )


def _check_chunk(chunk: Chunk, doc: Document) -> None:
    if chunk.doc_id != doc.id:
        raise IndexingError(f"chunker returned a chunk of {chunk.doc_id!r} for document {doc.id!r}")
    if (
        not (0 <= chunk.start <= chunk.end <= len(doc.text))
        or doc.text[chunk.start : chunk.end] != chunk.text
    ):
        raise IndexingError(
            f"chunker returned a chunk of {doc.id!r} whose text is not document[{chunk.start}:{chunk.end}]"
        )


def stage_chunks(
    store: Store, spec: Any, embedding_model: Any = None, *, chunker: Any = None
) -> ChunkStageReport:
    """Chunk added and changed documents (vs what the published index was built from) into staging.

    Removed and changed documents are recorded as staged removals. Re-running replaces the staging
    area of this index, so it is idempotent. A config whose hash differs from the published one
    re-chunks every document (a full rebuild, still published atomically). `chunker` overrides the
    one built from `spec.config.chunker` (it must set `config_key` to the config hash).
    """
    started = time.perf_counter()
    store.migrate()
    info = store.ensure_index(spec)
    index_name = spec.name
    report = ChunkStageReport(index=index_name)
    current = store.document_hashes(spec.collection)
    with store.connection() as conn:
        built = dict(
            conn.execute(
                "SELECT doc_id, sha256 FROM index_documents WHERE index_name = %s", (index_name,)
            ).fetchall()
        )
    report.full_rebuild = bool(info["version"] > 0 and info["config_hash"] != spec.config.config_hash)
    previous = {} if report.full_rebuild else built
    added = sorted(d for d in current if d not in previous)
    changed = sorted(d for d in current if d in previous and previous[d] != current[d])
    deleted = sorted(d for d in built if d not in current)
    unchanged = sorted(d for d in current if d in previous and previous[d] == current[d])
    removals = sorted(set(built) - set(unchanged))
    report.documents_added = len(added)
    report.documents_changed = len(changed)
    report.documents_deleted = len(deleted)
    report.documents_unchanged = len(unchanged)

    if chunker is None and (added or changed):
        from chunking import build_chunker

        chunker = build_chunker(
            spec.config.chunker, config_key=spec.config.config_hash, embedding_model=embedding_model
        )
    parts = partition_names(index_name)
    with store.connection() as conn, conn.transaction():
        conn.execute("SELECT 1 FROM indexes WHERE name = %s FOR UPDATE", (index_name,))
        _clear_staging(conn, index_name)
        conn.execute(
            "INSERT INTO staged_runs (index_name, config_hash, full_rebuild) VALUES (%s, %s, %s)",
            (index_name, spec.config.config_hash, report.full_rebuild),
        )
        if removals:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO staged_removals (index_name, doc_id) VALUES (%s, %s)",
                    [(index_name, d) for d in removals],
                )
        counts = dict(
            conn.execute(
                sql.SQL("SELECT doc_id, count(*) FROM {} GROUP BY doc_id").format(
                    sql.Identifier(parts["chunks"])
                )
            ).fetchall()
        )
        report.chunks_kept = sum(int(counts.get(d, 0)) for d in unchanged)
        report.chunks_to_delete = sum(int(counts.get(d, 0)) for d in removals)

        to_chunk = added + changed
        seen: set[str] = set()
        with conn.cursor() as cur:
            for i in range(0, len(to_chunk), CHUNK_DOC_BATCH):
                docs = store.documents(spec.collection, to_chunk[i : i + CHUNK_DOC_BATCH])
                cur.executemany(
                    "INSERT INTO staged_documents (index_name, doc_id, sha256) VALUES (%s, %s, %s)",
                    [(index_name, d.id, d.sha256) for d in docs],
                )
                chunk_lists = chunker.chunk_batch(docs)  # type: ignore[union-attr]
                rows = []
                vectors = []
                for doc, chunks in zip(docs, chunk_lists, strict=True):
                    for chunk in chunks:
                        _check_chunk(chunk, doc)
                        chunk_id = chunk.chunk_id
                        if chunk_id in seen:
                            report.duplicate_chunks_dropped += 1
                            continue
                        seen.add(chunk_id)
                        metadata = {**doc.metadata, **chunk.metadata}
                        rows.append(
                            (
                                index_name,
                                chunk_id,
                                chunk.doc_id,
                                chunk.start,
                                chunk.end,
                                chunk.text,
                                chunk.embed_text or "",
                                int(chunk.token_count or 0),
                                chunk.content_hash,
                                Jsonb(metadata),
                                chunk.parent_id,
                            )
                        )
                        if chunk.embedding is not None:  # late chunking: stored as computed
                            vectors.append(
                                (index_name, chunk_id, np.asarray(chunk.embedding, dtype=np.float32))
                            )
                with cur.copy(
                    'COPY staged_chunks (index_name, chunk_id, doc_id, start, "end", text, embed_text,'
                    " token_count, content_hash, metadata, parent_id) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(
                        [
                            "text",
                            "text",
                            "text",
                            "int4",
                            "int4",
                            "text",
                            "text",
                            "int4",
                            "text",
                            "jsonb",
                            "text",
                        ]
                    )
                    for row in rows:
                        copy.write_row(row)
                if vectors:
                    with cur.copy(
                        "COPY staged_embeddings (index_name, chunk_id, embedding) FROM STDIN (FORMAT BINARY)"
                    ) as copy:
                        copy.set_types(["text", "text", "vector"])
                        for row in vectors:
                            copy.write_row(row)
                report.chunks_staged += len(rows)
                report.chunks_precomputed_embeddings += len(vectors)
        conn.execute("ANALYZE staged_chunks")
        conn.execute("ANALYZE staged_embeddings")
        report.seconds = round(time.perf_counter() - started, 3)
        _merge_stage_report(conn, index_name, report.as_metadata())
    return report


def _staged_run(conn: Any, index_name: str, step: str) -> tuple[str, bool, str | None]:
    row = conn.execute(
        "SELECT config_hash, full_rebuild, model_id FROM staged_runs WHERE index_name = %s", (index_name,)
    ).fetchone()
    if row is None:
        raise IndexingError(f"{step}: nothing staged for index {index_name!r}; run stage_chunks first")
    return row[0], bool(row[1]), row[2]


def stage_embeddings(store: Store, spec: Any, embedder: Any) -> EmbeddingStageReport:
    """Vectors for every staged chunk: from the cache (model, content hash) or computed and cached."""
    from chunking.models import resolve_model_path

    started = time.perf_counter()
    index_name = spec.name
    model_path = getattr(embedder, "model_path", None)
    if model_path and resolve_model_path(spec.config.embedding_model) != model_path:
        raise IndexingError(
            f"stage_embeddings: index {index_name!r} uses {spec.config.embedding_model!r} but the "
            f"embedder is {embedder.model_id!r}"
        )
    report = EmbeddingStageReport(index=index_name, model_id=embedder.model_id)
    report.model_max_tokens = int(embedder.max_seq_length)
    with store.connection() as conn:
        config_hash, _, _ = _staged_run(conn, index_name, "stage_embeddings")
        if config_hash != spec.config.config_hash:
            raise IndexingError(
                f"stage_embeddings: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        conn.execute(
            "UPDATE staged_runs SET model_id = %s WHERE index_name = %s", (embedder.model_id, index_name)
        )
        report.embeddings_precomputed = int(
            conn.execute(
                "SELECT count(*) FROM staged_embeddings WHERE index_name = %s", (index_name,)
            ).fetchone()[0]
        )
        pending = conn.execute(
            "SELECT s.chunk_id, s.content_hash, s.embed_text FROM staged_chunks s"
            " WHERE s.index_name = %s AND NOT EXISTS (SELECT 1 FROM staged_embeddings e"
            " WHERE e.index_name = s.index_name AND e.chunk_id = s.chunk_id) ORDER BY s.chunk_id",
            (index_name,),
        ).fetchall()
    report.chunks = len(pending) + report.embeddings_precomputed
    texts_by_hash: dict[str, str] = {}
    for _, content_hash, embed_text in pending:
        texts_by_hash.setdefault(content_hash, embed_text)
    if texts_by_hash:
        token_counts = embedder.tokenizer.count_batch(list(texts_by_hash.values()))
        long_hashes = {
            h for h, n in zip(texts_by_hash, token_counts, strict=True) if n > embedder.max_seq_length
        }
        report.chunks_longer_than_model_limit = sum(1 for _, h, _ in pending if h in long_hashes)
    vectors = store.cached_embeddings(embedder.model_id, texts_by_hash)
    missing = [h for h in texts_by_hash if h not in vectors]
    embed_started = time.perf_counter()
    for i in range(0, len(missing), EMBED_BATCH):
        batch = missing[i : i + EMBED_BATCH]
        computed = embedder.embed([texts_by_hash[h] for h in batch])
        fresh = dict(zip(batch, computed, strict=True))
        store.cache_embeddings(embedder.model_id, fresh)
        vectors.update(fresh)
    report.embeddings_computed = len(missing)
    computed_hashes = set(missing)
    report.embeddings_reused = sum(1 for _, h, _ in pending if h not in computed_hashes)
    if missing:
        report.embeddings_per_second = round(len(missing) / max(time.perf_counter() - embed_started, 1e-9), 2)
    with store.connection() as conn, conn.transaction(), conn.cursor() as cur:
        with cur.copy(
            "COPY staged_embeddings (index_name, chunk_id, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "vector"])
            for chunk_id, content_hash, _ in pending:
                copy.write_row((index_name, chunk_id, vectors[content_hash]))
        cur.execute("ANALYZE staged_embeddings")
        report.seconds = round(time.perf_counter() - started, 3)
        _merge_stage_report(conn, index_name, report.as_metadata())
    return report


def stage_bm25(store: Store, spec: Any) -> Bm25StageReport:
    """Term frequencies and lengths of every staged chunk's `embed_text`, for the inverted index."""
    started = time.perf_counter()
    index_name = spec.name
    analyzer = build_analyzer(spec.config.bm25)
    report = Bm25StageReport(index=index_name, analyzer=analyzer.name)
    terms_seen: set[str] = set()
    with store.connection() as conn, conn.transaction():
        config_hash, _, _ = _staged_run(conn, index_name, "stage_bm25")
        if config_hash != spec.config.config_hash:
            raise IndexingError(
                f"stage_bm25: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        _clear_staging(conn, index_name, ("staged_bm25", "staged_bm25_lengths"))
        rows = conn.execute(
            "SELECT chunk_id, embed_text FROM staged_chunks WHERE index_name = %s", (index_name,)
        ).fetchall()
        with conn.cursor() as cur:
            with cur.copy(
                "COPY staged_bm25 (index_name, chunk_id, term, tf) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "text", "int4"])
                lengths = []
                for chunk_id, embed_text in rows:
                    terms = analyzer.analyze(embed_text)
                    lengths.append((index_name, chunk_id, len(terms)))
                    for term, tf in Counter(terms).items():
                        copy.write_row((index_name, chunk_id, term, tf))
                        report.postings_staged += 1
                        terms_seen.add(term)
            with cur.copy(
                "COPY staged_bm25_lengths (index_name, chunk_id, length) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "int4"])
                for row in lengths:
                    copy.write_row(row)
        conn.execute("ANALYZE staged_bm25")
        conn.execute("ANALYZE staged_bm25_lengths")
        report.chunks_analyzed = len(rows)
        report.distinct_terms_staged = len(terms_seen)
        report.seconds = round(time.perf_counter() - started, 3)
        _merge_stage_report(conn, index_name, report.as_metadata())
    return report


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise IndexingError(f"{name}: expected an integer, got {value!r}") from exc


def _maintenance_work_mem() -> str:
    return os.environ.get("CHUNKYARD_MAINTENANCE_WORK_MEM", "512MB")


def publish(store: Store, spec: Any) -> PublishReport:
    """Apply everything staged for the index in ONE transaction and bump its version."""
    started = time.perf_counter()
    index_name = spec.name
    parts = partition_names(index_name)
    chunks_t, postings_t = sql.Identifier(parts["chunks"]), sql.Identifier(parts["postings"])
    report = PublishReport(index=index_name)
    with store.connection() as conn, conn.transaction():
        row = conn.execute(
            "SELECT version, dim FROM indexes WHERE name = %s FOR UPDATE", (index_name,)
        ).fetchone()
        if row is None:
            raise IndexingError(f"publish: unknown index {index_name!r}; run stage_chunks first")
        version, old_dim = int(row[0]), row[1]
        run = conn.execute(
            "SELECT config_hash, full_rebuild, model_id, report FROM staged_runs WHERE index_name = %s",
            (index_name,),
        ).fetchone()
        if run is None:  # nothing staged: the published index is already current
            report.version = version
            report.chunks_total, report.documents_total = _sizes(conn, index_name, chunks_t)
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        config_hash, full_rebuild, model_id, staged_report = run
        report.staged = dict(staged_report or {})
        if config_hash != spec.config.config_hash:
            raise IndexingError(
                f"publish: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        staged_chunks, staged_removals = conn.execute(
            "SELECT (SELECT count(*) FROM staged_chunks WHERE index_name = %s),"
            " (SELECT count(*) FROM staged_removals WHERE index_name = %s)",
            (index_name, index_name),
        ).fetchone()
        if version > 0 and not full_rebuild and staged_chunks == 0 and staged_removals == 0:
            # nothing to index: keep the version (caches keyed on it stay valid), unless only the
            # retrieval options changed (hybrid, context_scoring: outside the config hash), which
            # are republished under a new version so every Searcher picks them up
            config = Jsonb(spec.config.as_dict())
            bumped = conn.execute(
                "UPDATE indexes SET version = version + 1, published_at = now(), config = %s"
                " WHERE name = %s AND config IS DISTINCT FROM %s RETURNING version",
                (config, index_name, config),
            ).fetchone()
            _clear_staging(conn, index_name)
            report.published = bumped is not None
            version = int(bumped[0]) if bumped else version
            report.version = version
            report.chunks_total, report.documents_total = _sizes(conn, index_name, chunks_t)
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        missing_vectors, missing_terms = conn.execute(
            "SELECT count(*) FILTER (WHERE e.chunk_id IS NULL), count(*) FILTER (WHERE l.chunk_id IS NULL)"
            " FROM staged_chunks s"
            " LEFT JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
            " LEFT JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
            " WHERE s.index_name = %s",
            (index_name,),
        ).fetchone()
        if missing_vectors:
            raise IndexingError(
                f"publish: {missing_vectors} staged chunks have no vector; run stage_embeddings"
            )
        if missing_terms:
            raise IndexingError(f"publish: {missing_terms} staged chunks have no BM25 terms; run stage_bm25")
        dims = conn.execute(
            "SELECT DISTINCT vector_dims(embedding) FROM staged_embeddings WHERE index_name = %s",
            (index_name,),
        ).fetchall()
        if len(dims) > 1:
            raise IndexingError(f"publish: staged vectors of {index_name!r} have mixed dimensions {dims}")
        new_dim = int(dims[0][0]) if dims else old_dim
        if old_dim and new_dim != old_dim and not full_rebuild:
            raise IndexingError(
                f"publish: staged vectors have {new_dim} dims but {index_name!r} has {old_dim}; re-run stage_chunks"
            )

        # 1. removals: old chunks of changed, deleted (or, on a rebuild, all) documents, with their postings
        conn.execute("CREATE TEMP TABLE _removed (chunk_id text PRIMARY KEY) ON COMMIT DROP")
        conn.execute(
            sql.SQL(
                "INSERT INTO _removed SELECT c.chunk_id FROM {} c WHERE c.index_name = %s"
                " AND (%s OR c.doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s))"
            ).format(chunks_t),
            (index_name, bool(full_rebuild), index_name),
        )
        conn.execute(
            sql.SQL(
                "UPDATE bm25_terms t SET df = t.df - d.n FROM (SELECT p.term, count(*) AS n FROM {} p"
                " JOIN _removed r ON r.chunk_id = p.chunk_id WHERE p.index_name = %s GROUP BY p.term) d"
                " WHERE t.index_name = %s AND t.term = d.term"
            ).format(postings_t),
            (index_name, index_name),
        )
        conn.execute("DELETE FROM bm25_terms WHERE index_name = %s AND df <= 0", (index_name,))
        conn.execute(
            sql.SQL(
                "DELETE FROM {} p USING _removed r WHERE p.index_name = %s AND p.chunk_id = r.chunk_id"
            ).format(postings_t),
            (index_name,),
        )
        deleted = conn.execute(
            sql.SQL(
                "DELETE FROM {} c USING _removed r WHERE c.index_name = %s AND c.chunk_id = r.chunk_id"
            ).format(chunks_t),
            (index_name,),
        )
        report.chunks_deleted = deleted.rowcount
        if full_rebuild:
            conn.execute("DELETE FROM index_documents WHERE index_name = %s", (index_name,))
        else:
            conn.execute(
                "DELETE FROM index_documents WHERE index_name = %s"
                " AND doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s)",
                (index_name, index_name),
            )

        # 2. HNSW: bulk loads drop the graph and rebuild it after the load (much faster than inserting)
        remaining = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(chunks_t)).fetchone()[0])
        incoming = int(
            conn.execute(
                "SELECT count(*) FROM staged_chunks WHERE index_name = %s", (index_name,)
            ).fetchone()[0]
        )
        hnsw_exists = conn.execute("SELECT to_regclass(%s)", (parts["hnsw"],)).fetchone()[0] is not None
        if hnsw_exists and (incoming > remaining or new_dim != old_dim):
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(parts["hnsw"])))
            hnsw_exists = False

        # 3. new chunks with vectors and BM25 lengths, postings, document frequencies
        inserted = conn.execute(
            sql.SQL(
                'INSERT INTO {} (index_name, chunk_id, doc_id, start, "end", text, embed_text, token_count,'
                " content_hash, metadata, parent_id, bm25_length, embedding)"
                ' SELECT s.index_name, s.chunk_id, s.doc_id, s.start, s."end", s.text, s.embed_text,'
                " s.token_count, s.content_hash, s.metadata, s.parent_id, l.length, e.embedding"
                " FROM staged_chunks s"
                " JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
                " JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
                " WHERE s.index_name = %s"
            ).format(chunks_t),
            (index_name,),
        )
        report.chunks_inserted = inserted.rowcount
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (index_name, term, chunk_id, tf, doc_len)"
                " SELECT b.index_name, b.term, b.chunk_id, b.tf, l.length FROM staged_bm25 b"
                " JOIN staged_bm25_lengths l ON l.index_name = b.index_name AND l.chunk_id = b.chunk_id"
                " WHERE b.index_name = %s"
            ).format(postings_t),
            (index_name,),
        )
        conn.execute(
            "INSERT INTO bm25_terms (index_name, term, df)"
            " SELECT index_name, term, count(*) FROM staged_bm25 WHERE index_name = %s GROUP BY index_name, term"
            " ON CONFLICT (index_name, term) DO UPDATE SET df = bm25_terms.df + excluded.df",
            (index_name,),
        )
        conn.execute(
            "INSERT INTO index_documents (index_name, doc_id, sha256)"
            " SELECT index_name, doc_id, sha256 FROM staged_documents WHERE index_name = %s"
            " ON CONFLICT (index_name, doc_id) DO UPDATE SET sha256 = excluded.sha256",
            (index_name,),
        )
        stats = refresh_stats(conn, index_name, parts["chunks"])
        report.bm25_vocabulary = stats.vocab_size

        # 4. the per-partition HNSW graph on the vector cast to this index's dimension
        # pgvector 0.6 indexes at most 2,000 dimensions (no halfvec): wider vectors are searched exactly.
        if not hnsw_exists and stats.n_docs > 0 and new_dim and new_dim <= HNSW_MAX_DIM:
            conn.execute(
                sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(_maintenance_work_mem()))
            )
            conn.execute("SET LOCAL max_parallel_maintenance_workers = 1")
            conn.execute(
                sql.SQL(
                    "CREATE INDEX {} ON {} USING hnsw ((embedding::vector({})) vector_cosine_ops)"
                    " WITH (m = {}, ef_construction = {})"
                ).format(
                    sql.Identifier(parts["hnsw"]),
                    chunks_t,
                    sql.Literal(int(new_dim)),
                    sql.Literal(_env_int("CHUNKYARD_HNSW_M", 16)),
                    sql.Literal(_env_int("CHUNKYARD_HNSW_EF_CONSTRUCTION", 64)),
                )
            )
            report.hnsw_built = True

        new_version = conn.execute(
            "UPDATE indexes SET version = version + 1, published_at = now(), config = %s, config_hash = %s,"
            " model_id = coalesce(%s, model_id), dim = %s WHERE name = %s RETURNING version",
            (Jsonb(spec.config.as_dict()), spec.config.config_hash, model_id, new_dim, index_name),
        ).fetchone()[0]
        _clear_staging(conn, index_name)
        report.version = int(new_version)
        report.published = True
        report.chunks_total = stats.n_docs
        report.documents_total = int(
            conn.execute(
                "SELECT count(*) FROM index_documents WHERE index_name = %s", (index_name,)
            ).fetchone()[0]
        )
    _analyze_partition(store, parts["chunks"], report)
    _analyze_partition(store, parts["postings"], report)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _analyze_partition(store: Store, partition: str, report: PublishReport) -> None:
    """Fresh planner statistics after big changes, so queries keep choosing the HNSW index."""
    if report.chunks_inserted + report.chunks_deleted == 0:
        return
    with store.connection() as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(partition)))


def _sizes(conn: Any, index_name: str, chunks_t: sql.Identifier) -> tuple[int, int]:
    chunks = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(chunks_t)).fetchone()[0])
    docs = int(
        conn.execute("SELECT count(*) FROM index_documents WHERE index_name = %s", (index_name,)).fetchone()[
            0
        ]
    )
    return chunks, docs


def build_index(store: Store, spec: Any, embedder: Any, *, chunker: Any = None) -> PublishReport:
    """stage_chunks -> stage_embeddings -> stage_bm25 -> publish, for scripts, tests and the CLI."""
    stage_chunks(store, spec, embedding_model=embedder, chunker=chunker)
    stage_embeddings(store, spec, embedder)
    stage_bm25(store, spec)
    return publish(store, spec)
