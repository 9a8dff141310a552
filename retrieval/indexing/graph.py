"""The index steps' graph, declared once: each stage's kind, the kinds it reads and its function.

chunks -> embeddings + bm25 -> index (the atomic publish). `build_index` runs these stages in this
order; `pipeline.graph` makes its steps (and the Dagster assets their dependencies) from the same
entries. A stage's module loads only when it runs, so reading the graph imports no stage.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class IndexStage:
    """One stage of an index: its kind, the kinds it reads and its `retrieval.indexing` function."""

    kind: str
    after: tuple[str, ...]
    module: str
    function: str
    takes_embedder: bool  # passed the index's Embedder (chunks: only strategies that embed)

    def load(self) -> Callable[..., Any]:
        return getattr(importlib.import_module(f"chunkyard.retrieval.indexing.{self.module}"), self.function)


INDEX_GRAPH: tuple[IndexStage, ...] = (
    IndexStage("chunks", (), "chunks", "stage_chunks", takes_embedder=True),
    IndexStage("embeddings", ("chunks",), "embeddings", "stage_embeddings", takes_embedder=True),
    IndexStage("bm25", ("chunks",), "terms", "stage_bm25", takes_embedder=False),
    IndexStage("index", ("embeddings", "bm25"), "publishing", "publish", takes_embedder=False),
)
PUBLISH = "index"
