"""Incremental indexing: stage chunks, vectors and term frequencies, then publish in one transaction.

One module per stage (chunks, embeddings, terms, publishing), each what one pipeline step calls.
Staging lives in Postgres (`staged_*` tables), so the stages can run in different processes;
`publish` applies removals, new chunks, vectors, postings and BM25 statistics in a single
transaction and bumps the index version, so a reader sees the old index or the new one, never a mix.

The names below load their module on first use: importing one stage runs no other stage's code
(which keeps each step's derived code version to what it runs, see `pipeline.versions`).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "build_index": "chunkyard.retrieval.indexing.build",
    "stage_chunks": "chunkyard.retrieval.indexing.chunks",
    "stage_embeddings": "chunkyard.retrieval.indexing.embeddings",
    "embed_shard": "chunkyard.retrieval.indexing.embed_shards",
    "stage_bm25": "chunkyard.retrieval.indexing.terms",
    "publish": "chunkyard.retrieval.indexing.publishing",
    "IndexingError": "chunkyard.retrieval.indexing.stage_reports",
    "ChunkStageReport": "chunkyard.retrieval.indexing.stage_reports",
    "EmbeddingStageReport": "chunkyard.retrieval.indexing.stage_reports",
    "Bm25StageReport": "chunkyard.retrieval.indexing.stage_reports",
    "PublishReport": "chunkyard.retrieval.indexing.stage_reports",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'chunkyard.retrieval.indexing' has no attribute {name!r}")
