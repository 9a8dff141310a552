"""Incremental indexing: stage chunks, vectors and term frequencies, then publish in one transaction.

One module per stage (chunks, embeddings, terms, publishing), each what one pipeline step calls.
Staging lives in Postgres (`staged_*` tables), so the stages can run in different processes;
`publish` applies removals, new chunks, vectors, postings and BM25 statistics in a single
transaction and bumps the index version, so a reader sees the old index or the new one, never a mix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chunking.base import BaseChunker
from retrieval.config import IndexSpec
from retrieval.indexing.chunks import stage_chunks
from retrieval.indexing.embeddings import stage_embeddings
from retrieval.indexing.publishing import publish
from retrieval.indexing.reports import (
    Bm25StageReport,
    ChunkStageReport,
    EmbeddingStageReport,
    IndexingError,
    PublishReport,
)
from retrieval.indexing.terms import stage_bm25
from retrieval.store import Store

if TYPE_CHECKING:
    from retrieval.embedder import Embedder

__all__ = [
    "Bm25StageReport",
    "ChunkStageReport",
    "EmbeddingStageReport",
    "IndexingError",
    "PublishReport",
    "build_index",
    "publish",
    "stage_bm25",
    "stage_chunks",
    "stage_embeddings",
]


def build_index(
    store: Store, spec: IndexSpec, embedder: Embedder, *, chunker: BaseChunker | None = None
) -> PublishReport:
    """stage_chunks -> stage_embeddings -> stage_bm25 -> publish, for scripts, tests and the CLI."""
    stage_chunks(store, spec, embedding_model=embedder, chunker=chunker)
    stage_embeddings(store, spec, embedder)
    stage_bm25(store, spec)
    return publish(store, spec)
