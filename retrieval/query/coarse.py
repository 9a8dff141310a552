"""Coarse fallback: ambiguous queries are answered by a coarse index (larger chunks) of the collection.

An index whose config has `coarse: {config, min_gap, rank}` measures, per query, the gap between
its first and `rank`-th (default 5, whatever k is) result's ranking score (`with_context`, or the
fused score min-max normalised over the candidates). Below `min_gap` (`coarse_min_gap` overrides
it; 0 never falls back) the query is answered by the sibling index `config` with its own ranking
settings. Every result carries the gap as `scores["fine_gap"]` and the index that answered as
`index`; a coarse answer's timings add the fine ranking's time (`fine_ms`) to its `total_ms` (the
work done; run side by side, the wall time is lower).

An ambiguous query's coarse ranking runs inside the fine query's own read transaction and connection, right
after its gap is known, and the fine ranking's rows are never fetched (when the coarse index uses
the same model and has no fallback of its own; else it is searched again afterwards). The coarse
search can also start beside the fine ranking, with the same query vector (`speculate`, for calls
of up to `searcher.SPECULATE_MAX_QUERIES` queries, off by default). All give the same answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np
from chunkyard.retrieval.query.fusion import RANKING_KEYS, Ranked
from chunkyard.retrieval.query.handles import IndexHandle
from chunkyard.retrieval.query.results import IndexNotFoundError, SearchResult
from chunkyard.retrieval.settings.index_defaults import CoarseFallback
from chunkyard.retrieval.settings.options import SearchOptions

BatchSearch = Callable[[list[str], str, SearchOptions, np.ndarray | None], list[list[SearchResult]]]


def ranking_gap(mode: str, ranked: Ranked, rank: int, with_context: bool) -> float:
    """How clearly the first result beats the `rank`-th: their ranking scores' difference, in [0, 1].

    With context scoring the ranking score (`with_context`) is already a mix of min-max normalised
    parts; otherwise the fused score is min-max normalised over the candidates first.
    """
    if len(ranked) < 2:
        return 1.0
    key = "with_context" if with_context else RANKING_KEYS[mode]
    values = [scores.get(key, 0.0) for _, scores in ranked]
    kth = values[min(rank, len(values)) - 1]
    if with_context:
        return float(values[0] - kth)
    spread = max(values) - min(values)
    return float((values[0] - kth) / spread) if spread > 0 else 0.0


def coarse_search(
    fine: IndexHandle,
    fallback: CoarseFallback,
    queries: Sequence[str],
    *,
    fine_vectors: np.ndarray | None,
    options: SearchOptions,
    load_handle: Callable[[str], IndexHandle],
    search_batch: BatchSearch,
) -> list[list[SearchResult]]:
    """The coarse index's answers to `queries` (`fine_vectors`: one row per query, or None).

    The coarse index ranks with its own settings (the request's index-level overrides stay with the
    fine index) and reuses the fine index's query vectors when both use the same model.
    """
    coarse_name = fine.name.sibling(fallback.config)
    try:
        coarse = load_handle(coarse_name)
    except IndexNotFoundError as exc:
        raise IndexNotFoundError(
            f"index {fine.name!r} falls back to {coarse_name!r} for ambiguous queries, but: {exc}"
        ) from exc
    vectors = fine_vectors if same_model(fine, coarse) else None
    return search_batch(list(queries), coarse.name, options.request_only(), vectors)


def same_model(fine: IndexHandle, coarse: IndexHandle) -> bool:
    """Whether the coarse index embeds with the fine one's model (so the query vectors carry over)."""
    return all(coarse.config.get(key) == fine.config.get(key) for key in ("embedding_model", "embedder"))


def speculate(search: Callable[[], list[list[SearchResult]]]) -> Future[list[list[SearchResult]]]:
    """Start the coarse search now, in its own thread (its own pooled connection and read transaction).

    A single query's coarse candidates are then read while the fine index ranks, so an ambiguous
    query costs the slower of the two rankings instead of their sum; an unambiguous one drops the
    answer (and any error: the fallback was not needed). A plain thread, not a pool, so a coarse
    index with its own fallback can never wait on a saturated pool.
    """
    future: Future[list[list[SearchResult]]] = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(search())
        except BaseException as exc:  # handed to whoever asks for the answer
            future.set_exception(exc)

    threading.Thread(target=work, daemon=True, name="coarse-speculation").start()
    return future


def coarse_answers(
    ambiguous: list[int],
    gaps: list[float],
    totals_ms: list[float],
    results: list[list[SearchResult]],
    answers_for: Callable[[list[int]], list[list[SearchResult]]],
) -> list[list[SearchResult]]:
    """`results` with the `ambiguous` queries' answers replaced by the coarse index's.

    `answers_for(positions)` gives the coarse answers of those queries (searched now, or taken from
    a speculative search started beside the fine ranking).
    """
    answers = answers_for(ambiguous)
    merged = list(results)
    for qi, answer in zip(ambiguous, answers, strict=True):
        merged[qi] = as_coarse_answer(answer, gaps[qi], totals_ms[qi])
    return merged


def as_coarse_answer(answer: list[SearchResult], gap: float, fine_ms: float) -> list[SearchResult]:
    """The coarse index's `answer` to a query whose fine ranking had `gap` and took `fine_ms`."""
    fine_ms = round(fine_ms, 3)
    for result in answer:
        result.scores["fine_gap"] = gap
        result.timings = {
            **result.timings,
            "fine_ms": fine_ms,
            "total_ms": round(result.timings.get("total_ms", 0.0) + fine_ms, 3),
        }
    return answer
