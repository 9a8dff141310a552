"""Fusion stage: merge the dense and BM25 candidate lists into one ranking (RRF, weighted or calibrated)."""

from __future__ import annotations

import math

Candidates = list[tuple[str, float]]  # (chunk_id, score), best first
Ranked = list[tuple[str, dict[str, float]]]  # (chunk_id, every stage's score), best first

RANKING_KEYS = {
    "dense": "dense",
    "bm25": "bm25",
    "hybrid": "rrf",
    "hybrid_weighted": "weighted",
    "hybrid_auto": "auto",
}
AGREEMENT_DEPTH = 10  # how many of each list's top candidates the other list is asked to corroborate
# With `trust_dense` (a search option; index default `hybrid.trust_dense`, else off), a query whose best
# dense chunk BM25 also ranks in its top AGREEMENT_DEPTH gets at least this multiple of the base dense
# weight (0.35 at the default 0.25): where the two agree on the top, dense orders the rest. Long
# documents, MRR@5 66.2 -> 73.2 (MiniLM) and 66.1 -> 68.4 (e5-small), no hit@5 lost; off by default as
# one e5 question fell out of the 1,024-token budget (benchmarks/results/long_documents.md).
CONFIRMED_DENSE_SCALE = 1.4


def fuse(
    mode: str,
    dense: Candidates,
    lexical: Candidates,
    rrf_k: float,
    weight: float,
    auto_weight: float = 0.25,
    *,
    cross_language: bool = False,
    trust_dense: bool = False,
) -> Ranked:
    """Merge ranked lists into one ranking with every stage's score kept per chunk.

    `hybrid` adds reciprocal ranks (`1 / (rrf_k + rank)`); `hybrid_weighted` mixes the min-max
    normalised scores with dense weight `weight`; `hybrid_auto` mixes them with the per-query
    weight of `calibrated_weight(dense, lexical, auto_weight)` (`trusted_weight` with `trust_dense`;
    kept as `scores["auto_weight"]`),
    or with dense alone (weight 1: BM25 only orders what dense ties or never found) for a question in
    another language than the documents (`cross_language`, `retrieval.lexical.languages.crosses_languages`):
    there BM25 matches only names, numbers and look-alike words, and a multilingual model does not
    need it (measured in benchmarks/results/languages.md).
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
    elif mode in ("hybrid_weighted", "hybrid_auto"):
        if mode == "hybrid_auto":
            weigh = trusted_weight if trust_dense else calibrated_weight
            weight = 1.0 if cross_language else weigh(dense, lexical, auto_weight)
        dense_norm = min_max(dict(dense))
        bm25_norm = min_max(dict(lexical))
        for cid, entry in scores.items():
            entry[key] = weight * dense_norm.get(cid, 0.0) + (1 - weight) * bm25_norm.get(cid, 0.0)
            if mode == "hybrid_auto":
                entry["auto_weight"] = weight
    order = sorted(scores, key=lambda cid: (-scores[cid][key], cid))
    return [(cid, scores[cid]) for cid in order]


def corroboration(ranked: Candidates, other: Candidates, depth: int = AGREEMENT_DEPTH) -> float:
    """The share of `ranked`'s top `depth` chunks that `other` also retrieved (0 when `ranked` is empty)."""
    top = [cid for cid, _ in ranked[:depth]]
    if not top:
        return 0.0
    seen = {cid for cid, _ in other}
    return sum(cid in seen for cid in top) / len(top)


def calibrated_weight(dense: Candidates, lexical: Candidates, base: float) -> float:
    """The dense weight of `hybrid_auto` for one query: `base` scaled by how well BM25 backs dense.

    Each list's top candidates are looked up in the other list. A list whose top results the
    other list also found is the one to trust: `2 * base * c_dense / (c_dense + c_bm25)`, so equal
    corroboration gives `base`, dense results BM25 never saw push the weight towards 0 (a dense
    model weak on the corpus), and BM25 results dense never saw push it up to `2 * base`. No
    corroboration either way (or an empty list) keeps `base`.
    """
    c_dense, c_bm25 = corroboration(dense, lexical), corroboration(lexical, dense)
    share = c_dense / (c_dense + c_bm25) if c_dense + c_bm25 > 0 else 0.5
    return min(1.0, 2.0 * base * share)


def trusted_weight(dense: Candidates, lexical: Candidates, base: float) -> float:
    """`hybrid_auto`'s dense weight for one query: `calibrated_weight`, raised to at least
    `CONFIRMED_DENSE_SCALE * base` when BM25's top `AGREEMENT_DEPTH` hold dense's best chunk."""
    weight = calibrated_weight(dense, lexical, base)
    if dense and dense[0][0] in {cid for cid, _ in lexical[:AGREEMENT_DEPTH]}:
        weight = max(weight, min(1.0, CONFIRMED_DENSE_SCALE * base))
    return weight


def min_max(values: dict[str, float]) -> dict[str, float]:
    """Scale to [0, 1] over the given candidates (all 1.0 when they are equal)."""
    if not values:
        return {}
    low, high = min(values.values()), max(values.values())
    if math.isclose(high, low):
        return {cid: 1.0 for cid in values}
    return {cid: (v - low) / (high - low) for cid, v in values.items()}
