"""`build_index`: every stage of the index graph in order, for scripts, tests and the benchmarks' own indexes."""

from __future__ import annotations

from chunkyard.chunking.base import BaseChunker
from chunkyard.retrieval.config import IndexSpec
from chunkyard.retrieval.embedder import Embedder
from chunkyard.retrieval.indexing.graph import INDEX_GRAPH, PUBLISH
from chunkyard.retrieval.indexing.stage_reports import PublishReport
from chunkyard.retrieval.store import Store


def build_index(
    store: Store, spec: IndexSpec, embedder: Embedder, *, chunker: BaseChunker | None = None
) -> PublishReport:
    """The stages of `INDEX_GRAPH` in order (chunks with `chunker` when given); the publish's report."""
    report = None
    for stage in INDEX_GRAPH:
        args = (store, spec, embedder) if stage.takes_embedder else (store, spec)
        report = stage.load()(*args, **({"chunker": chunker} if stage.kind == "chunks" else {}))
    assert INDEX_GRAPH[-1].kind == PUBLISH and isinstance(report, PublishReport)
    return report
