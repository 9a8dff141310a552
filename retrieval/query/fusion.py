"""Fusion stage: merge the dense and BM25 candidate lists into one ranking (RRF or weighted scores)."""

from __future__ import annotations

import math

Candidates = list[tuple[str, float]]  # (chunk_id, score), best first
Ranked = list[tuple[str, dict[str, float]]]  # (chunk_id, every stage's score), best first

RANKING_KEYS = {"dense": "dense", "bm25": "bm25", "hybrid": "rrf", "hybrid_weighted": "weighted"}


def fuse(mode: str, dense: Candidates, lexical: Candidates, rrf_k: float, weight: float) -> Ranked:
    """Merge ranked lists into one ranking with every stage's score kept per chunk.

    `hybrid` adds reciprocal ranks (`1 / (rrf_k + rank)`); `hybrid_weighted` mixes the min-max
    normalised scores with dense weight `weight`.
    """
    scores: dict[str, dict[str, float]] = {}
    for rank, (cid, value) in enumerate(dense, start=1):
        scores.setdefault(cid, {})["dense"] = value
        scores[cid]["dense_rank"] = rank
    for rank, (cid, value) in enumerate(lexical, start=1):
        scores.setdefault(cid, {})["bm25"] = value
        scores[cid]["bm25_rank"] = rank
    key = RANKING_KEYS[mode]
    if mode == "hybrid":
        for entry in scores.values():
            entry["rrf"] = sum(1.0 / (rrf_k + entry[r]) for r in ("dense_rank", "bm25_rank") if r in entry)
    elif mode == "hybrid_weighted":
        dense_norm = min_max(dict(dense))
        bm25_norm = min_max(dict(lexical))
        for cid, entry in scores.items():
            entry["weighted"] = weight * dense_norm.get(cid, 0.0) + (1 - weight) * bm25_norm.get(cid, 0.0)
    order = sorted(scores, key=lambda cid: (-scores[cid][key], cid))
    return [(cid, scores[cid]) for cid in order]


def min_max(values: dict[str, float]) -> dict[str, float]:
    """Scale to [0, 1] over the given candidates (all 1.0 when they are equal)."""
    if not values:
        return {}
    low, high = min(values.values()), max(values.values())
    if math.isclose(high, low):
        return {cid: 1.0 for cid in values}
    return {cid: (v - low) / (high - low) for cid, v in values.items()}
