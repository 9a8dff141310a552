"""Pseudo-relevance feedback for BM25: the query's terms plus the best terms of its own top chunks.

With `bm25_feedback: true` the lexical stage runs twice: the query's analysed terms rank the index,
the top `FEEDBACK_CHUNKS` chunks' texts are analysed with the same analyzer, and each term they hold
that the query does not is weighed by how often it occurs there (its share of each chunk's terms,
summed over the chunks, each chunk counting by its rank: 1, 1/2, 1/3) times its idf (the in-memory
copy's; all 1 without one). The best `FEEDBACK_TERMS` of them join the query once each, the
query's own terms count `ORIGINAL_REPEAT` times (BM25 sums a repeated term again), and that query
ranks the index a second time. Nothing is expanded when the first pass finds nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

FEEDBACK_CHUNKS = 3  # the first pass's top chunks whose terms may join the query
FEEDBACK_TERMS = 5  # how many of their terms join it
ORIGINAL_REPEAT = 2  # each of the query's own terms counts this many times in the second pass
Analyze = Callable[[str], list[str]]


def expansion_terms(
    query_terms: Sequence[str],
    feedback_texts: Sequence[str],
    analyze: Analyze,
    idf: Mapping[str, float] | None = None,
    n_terms: int = FEEDBACK_TERMS,
) -> list[str]:
    """The `n_terms` best terms of `feedback_texts` (best first) that are not among `query_terms`."""
    own = set(query_terms)
    weights: Counter[str] = Counter()
    for rank, text in enumerate(feedback_texts, start=1):
        counts = Counter(analyze(text))
        total = sum(counts.values())
        if not total:
            continue
        for term, count in counts.items():
            if term not in own:
                weights[term] += (count / total) / rank
    scored = {term: weight * (1.0 if idf is None else idf.get(term, 0.0)) for term, weight in weights.items()}
    ranked = sorted((t for t, w in scored.items() if w > 0), key=lambda t: (-scored[t], t))
    return ranked[:n_terms]


def feedback_query(query_terms: Sequence[str], expansion: Sequence[str]) -> list[str]:
    """The second pass's terms: each query term `ORIGINAL_REPEAT` times, then each expansion term once."""
    return [t for t in query_terms for _ in range(ORIGINAL_REPEAT)] + list(expansion)
