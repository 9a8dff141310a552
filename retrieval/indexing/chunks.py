"""Stage 1: chunk the added and changed documents into the staging area (removals recorded)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from chunkyard.chunking.base import BaseChunker
from chunkyard.chunking.types import Chunk, Document, without_locations
from chunkyard.retrieval.indexing.stage_reports import ChunkStageReport, IndexingError
from chunkyard.retrieval.indexing.staging import analyze_staged
from chunkyard.retrieval.lexical.languages import METADATA_KEY, document_language
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store, documents, published
from chunkyard.retrieval.store import staging as staging_rows
from chunkyard.retrieval.store.indexes import drop_next_tables, partition_names
from psycopg import Connection
from psycopg.types.json import Jsonb

if TYPE_CHECKING:
    from chunkyard.retrieval.embedders.embedder import Embedder

CHUNK_DOC_BATCH = 64  # documents per chunker call


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
    store: Store,
    spec: IndexSpec,
    embedding_model: Embedder | None = None,
    *,
    chunker: BaseChunker | None = None,
    owner: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ChunkStageReport:
    """Chunk added and changed documents (vs what the published index was built from) into staging.

    Removed and changed documents are recorded as staged removals. Re-running replaces the staging
    area of this index, so it is idempotent. A config whose hash differs from the published one
    re-chunks every document (a full rebuild, still published atomically). `chunker` overrides the
    one built from `spec.config.chunker` (it must set `config_key` to the config hash). `owner` (a
    run id) becomes the staging's owner: the later stages of other runs stop (`staging.check_owner`).
    The documents and the published state are read under the index row's lock, so a publish that
    lands meanwhile is seen (its documents are not staged twice). `progress(done, total)` is called
    with the documents chunked after each batch.
    """
    started = time.perf_counter()
    store.migrate()
    info = store.indexes.ensure(spec)
    index_name = spec.name
    report = ChunkStageReport(index=index_name)
    parts = partition_names(index_name)
    with store.connection() as conn, conn.transaction():
        published.lock_index(conn, index_name)
        drop_next_tables(conn, index_name)  # a killed build's, or postings prepared for a swap
        info = store.indexes.info(index_name) or info  # as of the lock: a publish may have landed meanwhile
        report.full_rebuild = bool(info["version"] > 0 and info["config_hash"] != spec.config.config_hash)
        delta = documents.staging_delta(
            conn, spec.collection, index_name, parts["chunks"], report.full_rebuild
        )
        report.documents_added = len(delta.added)
        report.documents_changed = len(delta.changed)
        report.documents_deleted = len(delta.deleted)
        report.documents_unchanged = len(delta.unchanged)
        report.chunks_to_delete = delta.chunks_to_delete
        report.chunks_kept = max(int(info["chunk_count"]) - report.chunks_to_delete, 0)
        to_chunk = delta.added + delta.changed
        if chunker is None and to_chunk:
            from chunkyard.chunking import build_chunker

            # sizes in `tokenizer: model` count the index's own embedding model's tokens, unless it names another
            chunker = build_chunker(
                {"model": spec.config.embedding_model, **spec.config.chunker},
                config_key=spec.config.config_hash,
                embedding_model=embedding_model,
            )
        staging_rows.open_run(
            conn,
            index_name,
            spec.config.config_hash,
            report.full_rebuild,
            {"owner": owner} if owner else {},
            delta.removals,
        )
        _chunk_into_staging(store, conn, spec, to_chunk, chunker, report, progress)
        analyze_staged(conn, report.chunks_staged, "staged_chunks", "staged_embeddings")
        report.seconds = report.chunk_stage_seconds = round(time.perf_counter() - started, 3)
        report.load_seconds, report.chunk_seconds = (
            round(report.load_seconds, 3),
            round(report.chunk_seconds, 3),
        )
        staging_rows.merge_run_report(conn, index_name, report.as_metadata())
    return report


def _chunk_into_staging(
    store: Store,
    conn: Connection,
    spec: IndexSpec,
    to_chunk: list[str],
    chunker: BaseChunker | None,
    report: ChunkStageReport,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Chunk the documents `to_chunk` by batches into the run stage_chunks opened, on its transaction
    (`chunker`: None only when there is nothing to chunk)."""
    index_name = spec.name
    seen: set[str] = set()
    with conn.cursor() as cur:
        for i in range(0, len(to_chunk), CHUNK_DOC_BATCH):
            load_started = time.perf_counter()
            docs = store.documents.read(spec.collection, to_chunk[i : i + CHUNK_DOC_BATCH])
            report.load_seconds += time.perf_counter() - load_started
            chunk_started = time.perf_counter()
            chunk_lists = chunker.chunk_batch(docs)  # type: ignore[union-attr]
            report.chunk_seconds += time.perf_counter() - chunk_started
            rows = []
            vectors = []
            for doc, chunks in zip(docs, chunk_lists, strict=True):
                language = {METADATA_KEY: lang} if (lang := document_language(doc)) else {}
                for chunk in chunks:
                    _check_chunk(chunk, doc)
                    chunk_id = chunk.chunk_id
                    if chunk_id in seen:
                        report.duplicate_chunks_dropped += 1
                        continue
                    seen.add(chunk_id)
                    metadata = {**language, **without_locations(doc.metadata), **chunk.metadata}
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
                        vectors.append((index_name, chunk_id, np.asarray(chunk.embedding, dtype=np.float32)))
            staging_rows.stage_chunk_batch(cur, index_name, [(d.id, d.sha256) for d in docs], rows, vectors)
            report.chunks_staged += len(rows)
            report.chunks_precomputed_embeddings += len(vectors)
            if progress:
                progress(min(i + CHUNK_DOC_BATCH, len(to_chunk)), len(to_chunk))
