"""Rerank stage: reorder the first-stage hits by a second-stage reranker (`retrieval.embedders.rerankers`)."""

from __future__ import annotations

import threading

from chunkyard.retrieval.embedders.rerankers import Reranker
from chunkyard.retrieval.query.dense import QueryEmbedder
from chunkyard.retrieval.query.fusion import Ranked
from chunkyard.retrieval.query.rows import ChunkRow


class Rerankers:
    """Rerankers by name, built once per Searcher (`maxsim` uses the Searcher's embedder if it has one)."""

    def __init__(self, embedder: QueryEmbedder | None) -> None:
        self._embedder = embedder
        self._built: dict[str, Reranker] = {}
        self._lock = threading.Lock()

    def get(self, rerank: str | Reranker | None) -> Reranker | None:
        if rerank is None:
            return None
        if not isinstance(rerank, str):
            return rerank
        with self._lock:
            if rerank not in self._built:
                from chunkyard.retrieval.embedders.rerankers import build_reranker

                self._built[rerank] = build_reranker(rerank, embedder=self._embedder)
            return self._built[rerank]


def rerank(hits: Ranked, reranker: Reranker, query: str, rows: dict[str, ChunkRow]) -> Ranked:
    """The hits by descending reranker score, kept as `scores["rerank"]`."""
    values = reranker.score(query, [rows[cid].text for cid, _ in hits])
    for (_, scores), value in zip(hits, values, strict=True):
        scores["rerank"] = float(value)
    return sorted(hits, key=lambda h: -h[1]["rerank"])
