"""MMR stage: maximal marginal relevance, relevance to the query minus similarity to what is picked."""

from __future__ import annotations

import numpy as np
from chunkyard.retrieval.query.fusion import Ranked
from chunkyard.retrieval.query.rows import ChunkRow


def mmr(hits: Ranked, rows: dict[str, ChunkRow], query_vector: np.ndarray, lam: float, k: int) -> Ranked:
    """The `k` hits picked greedily by `lam * relevance - (1 - lam) * max similarity to those picked`."""
    if not hits:
        return hits
    vectors = np.stack([rows[cid].embedding for cid, _ in hits])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
    relevance = vectors @ (query_vector / max(np.linalg.norm(query_vector), 1e-12))
    chosen: list[int] = []
    redundancy = np.full(len(hits), -np.inf)
    remaining = set(range(len(hits)))
    while remaining and len(chosen) < k:
        best = max(
            remaining,
            key=lambda i: (lam * relevance[i] - (1 - lam) * (redundancy[i] if chosen else 0.0), -i),
        )
        chosen.append(best)
        remaining.discard(best)
        redundancy = np.maximum(redundancy, vectors @ vectors[best])
    out = []
    for i in chosen:
        cid, scores = hits[i]
        scores["mmr"] = float(lam * relevance[i])
        out.append((cid, scores))
    return out
