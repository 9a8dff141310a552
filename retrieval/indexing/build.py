"""`build_index`: every stage in order, for scripts, tests and the benchmarks' own indexes."""

from __future__ import annotations

from chunking.base import BaseChunker
from retrieval.config import IndexSpec
from retrieval.embedder import Embedder
from retrieval.indexing.chunks import stage_chunks
from retrieval.indexing.embeddings import stage_embeddings
from retrieval.indexing.publishing import publish
from retrieval.indexing.reports import PublishReport
from retrieval.indexing.terms import stage_bm25
from retrieval.store import Store


def build_index(
    store: Store, spec: IndexSpec, embedder: Embedder, *, chunker: BaseChunker | None = None
) -> PublishReport:
    """stage_chunks -> stage_embeddings -> stage_bm25 -> publish, for scripts, tests and the CLI."""
    stage_chunks(store, spec, embedding_model=embedder, chunker=chunker)
    stage_embeddings(store, spec, embedder)
    stage_bm25(store, spec)
    return publish(store, spec)
