"""Mix each candidate's own score with its context's and rank: the entry point searches call."""

from __future__ import annotations

import math

import numpy as np
import psycopg
from chunkyard.retrieval.query.context.evidence import (
    ContextEvidence,
    ContextQuery,
    score_contexts,
    score_contexts_in_memory,
)
from chunkyard.retrieval.query.context.layout import ChunkLayout
from chunkyard.retrieval.query.context.statistics import ContextStatistics
from chunkyard.retrieval.query.fusion import Ranked
from chunkyard.retrieval.query.handles import IndexHandle
from chunkyard.retrieval.query.plan import Query
from chunkyard.retrieval.settings.index_defaults import ContextScoring


def fuse_with_context(
    mode: str,
    fused: Ranked,
    evidence: ContextEvidence,
    settings: ContextScoring,
    *,
    dense_weight: float,
    rrf_k: float,
) -> Ranked:
    """Re-rank fused candidates by `(1 - weight) * own + weight * context`, keeping every score.

    The context score follows the mode: dense cosine, BM25, their weighted mix (`hybrid_weighted`,
    with the mode's dense weight) or their reciprocal rank fusion (`hybrid`). `evidence` is aligned
    with `fused`; each step is the same float operation per candidate as a loop would do.
    """
    own_key = {"dense": "dense", "bm25": "bm25", "hybrid": "rrf", "hybrid_auto": "auto"}.get(mode, "weighted")
    ids = [cid for cid, _ in fused]
    entries = [scores for _, scores in fused]
    n = len(ids)
    dense, has_dense = _scored(evidence.dense, n)
    bm25, has_bm25 = _scored(evidence.bm25, n)
    focus, has_focus = _scored(evidence.focus, n)
    if mode == "dense":
        context = np.where(has_dense, dense, 0.0)
    elif mode == "bm25":
        context = np.where(has_bm25, bm25, 0.0)
    elif mode == "hybrid":
        context = np.zeros(n)
        for values, scored in ((dense, has_dense), (bm25, has_bm25)):
            order = sorted(np.flatnonzero(scored).tolist(), key=lambda k: (-values[k], ids[k]))
            context[order] += 1.0 / (rrf_k + np.arange(1, len(order) + 1))
    else:
        context = dense_weight * _min_max(dense, has_dense) + (1 - dense_weight) * _min_max(bm25, has_bm25)
    with_focus = bool(has_focus.any())
    focus_weight = settings.focus_weight if with_focus else 0.0
    everyone = np.ones(n, dtype=bool)
    own = np.array([scores.get(own_key, 0.0) for scores in entries], dtype=np.float64)
    own_weight = 1.0 - settings.weight - focus_weight
    value = own_weight * _min_max(own, everyone) + settings.weight * _min_max(context, everyone)
    focus = np.where(has_focus, focus, 0.0)
    if with_focus:
        value += focus_weight * _min_max(focus, everyone)
    columns = [dense.tolist(), has_dense.tolist(), bm25.tolist(), has_bm25.tolist(), context.tolist()]
    focus_list, value_list = focus.tolist(), value.tolist()
    for k, (d, has_d, b, has_b, c) in enumerate(zip(*columns, strict=True)):
        scores = entries[k]
        if has_d:
            scores["context_dense"] = d
        if has_b:
            scores["context_bm25"] = b
        scores["context"] = c
        if with_focus:
            scores["focus"] = focus_list[k]
        scores["with_context"] = value_list[k]
    order = sorted(range(n), key=lambda k: (-value_list[k], ids[k]))
    return [fused[k] for k in order]


def _scored(values: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`values` (NaN: not scored) as an array and its mask of scored candidates; None: none scored."""
    if values is None:
        return np.zeros(n), np.zeros(n, dtype=bool)
    return values, ~np.isnan(values)


def _min_max(values: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """`fusion.min_max` over the scored values (1.0 when they are equal); 0.0 for the others."""
    out = np.zeros(len(values))
    if not scored.any():
        return out
    present = values[scored]
    low, high = float(present.min()), float(present.max())
    out[scored] = 1.0 if math.isclose(high, low) else (present - low) / (high - low)
    return out


def rank_with_context(
    conn: psycopg.Connection,
    handle: IndexHandle,
    layout: ChunkLayout,
    query: Query,
    fused: Ranked,
    statistics: ContextStatistics | None = None,
) -> Ranked:
    """The context stage: score the candidates' contexts and re-rank with them.

    With `statistics` (the index version's, in memory) no query is sent; without, the postings,
    term statistics and vectors are read in the caller's read transaction (`score_contexts`).
    """
    plan, mode = query.plan, query.plan.mode
    context = ContextQuery(
        plan.context,
        handle.analyzer.analyze(query.text) if mode != "dense" else None,
        query.vector if mode != "bm25" else None,
    )
    candidates = [cid for cid, _ in fused]
    if statistics is not None:
        evidence = score_contexts_in_memory(conn, handle, statistics, context, candidates)
    else:
        evidence = score_contexts(conn, handle, layout, context, candidates)
    dense_weight = fused[0][1].get("auto_weight", plan.weight)  # hybrid_auto: this query's
    return fuse_with_context(mode, fused, evidence, plan.context, dense_weight=dense_weight, rrf_k=plan.rrf_k)
