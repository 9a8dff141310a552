"""Retrieval metrics over character spans: hit@k, MRR@k, nDCG@k, MAP@k, recall/precision/IoU, CIs.

Every metric is computed per question from the ranked retrieved spans and the question's
reference spans, then averaged over questions (each question weighs the same, as in
Chroma's report). Formulas are in docs/metrics.md. Two families of character metrics:

- "union" (`precision_at_k`, `iou_at_k`): the retrieved chunks' characters as a set, so
  overlapping chunks are counted once.
- "chroma" (`chroma_precision_at_k`, `chroma_iou_at_k`): Chroma's definitions as their
  evaluation code computes them: the denominator adds up every retrieved chunk's length
  (overlapping chunks count twice, chunks from another corpus count too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from chunkyard.evaluation.datasets.types import Question, Span
from chunkyard.evaluation.estimates import Estimate, bootstrap_ci, float_or_nan, json_float

DEFAULT_K = 5
FAILURE_K = 20
DEFAULT_BUDGETS = (1024, 2048)
# The names a metric is reported under (`score_question`'s keys, k substituted): a new metric is a
# function here, a key in `score_question`, and its name in these lists.
# Headline metrics shown in tables, in this order (with k substituted).
TABLE_METRICS = (
    "hit_at_{k}",
    "mrr_at_{k}",
    "ndcg_at_{k}",
    "map_at_{k}",
    "recall_at_{k}",
    "precision_at_{k}",
    "iou_at_{k}",
    "chroma_precision_at_{k}",
    "chroma_iou_at_{k}",
    "recall_at_20",
    "budget_recall_1024",
    "budget_recall_2048",
    "trimmed_recall_1024",
    "trimmed_recall_2048",
)
# Per variant, the means plotted per materialisation (Dagster numeric metadata), and the cost figures.
HEADLINE_METRICS = ("hit_at_{k}", "mrr_at_{k}", "recall_at_{k}", "precision_at_{k}", "iou_at_{k}")
HEADLINE_COST = ("chunks",)
# Higher-is-better means a regression is measured on ({budget}: each context budget evaluated).
QUALITY_METRICS = (
    *HEADLINE_METRICS,
    "chroma_precision_at_{k}",
    "chroma_iou_at_{k}",
    "budget_recall_{budget}",
)


class SpanLike(Protocol):
    doc_id: str
    start: int
    end: int


Interval = tuple[int, int]


def as_span(item: SpanLike | Span) -> Span:
    if isinstance(item, Span):
        return item
    return Span(str(item.doc_id), int(item.start), int(item.end))


# ---------------------------------------------------------------------------
# Character-set arithmetic on spans (per document, half-open intervals)
# ---------------------------------------------------------------------------


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Union of half-open intervals as sorted, disjoint, non-touching intervals (empty ones dropped)."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def union_by_doc(spans: Iterable[Span]) -> dict[str, list[Interval]]:
    grouped: dict[str, list[Interval]] = {}
    for span in spans:
        grouped.setdefault(span.doc_id, []).append((span.start, span.end))
    return {doc: merge_intervals(iv) for doc, iv in grouped.items()}


def total_length(union: Mapping[str, list[Interval]]) -> int:
    return sum(end - start for intervals in union.values() for start, end in intervals)


def _intersect_sorted(a: list[Interval], b: list[Interval]) -> int:
    """Characters in both of two merged interval lists (two-pointer sweep)."""
    i = j = covered = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            covered += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return covered


def intersection_length(a: Mapping[str, list[Interval]], b: Mapping[str, list[Interval]]) -> int:
    return sum(_intersect_sorted(intervals, b[doc]) for doc, intervals in a.items() if doc in b)


def overlap(a: Span, b: Span) -> int:
    """Characters shared by two spans (0 for different documents)."""
    if a.doc_id != b.doc_id:
        return 0
    return max(0, min(a.end, b.end) - max(a.start, b.start))


# ---------------------------------------------------------------------------
# Per-question metrics
# ---------------------------------------------------------------------------


def first_relevant_rank(
    retrieved: Sequence[Span], references: Sequence[Span], *, min_overlap: int = 1
) -> int | None:
    """1-based rank of the first retrieved span sharing >= min_overlap characters with a reference."""
    for rank, span in enumerate(retrieved, start=1):
        if any(overlap(span, ref) >= min_overlap for ref in references):
            return rank
    return None


def hit_at_k(retrieved: Sequence[Span], references: Sequence[Span], k: int, *, min_overlap: int = 1) -> float:
    rank = first_relevant_rank(retrieved[:k], references, min_overlap=min_overlap)
    return 1.0 if rank is not None else 0.0


def reciprocal_rank_at_k(
    retrieved: Sequence[Span], references: Sequence[Span], k: int, *, min_overlap: int = 1
) -> float:
    rank = first_relevant_rank(retrieved[:k], references, min_overlap=min_overlap)
    return 1.0 / rank if rank is not None else 0.0


def relevance_at_k(
    retrieved: Sequence[Span], references: Sequence[Span], k: int, *, min_overlap: int = 1
) -> list[int]:
    """Binary relevance of the top k: 1 where a chunk shares >= min_overlap characters with a
    reference (the test hit@k and MRR@k use), else 0."""
    return [int(any(overlap(span, ref) >= min_overlap for ref in references)) for span in retrieved[:k]]


def ndcg_at_k(
    retrieved: Sequence[Span], references: Sequence[Span], k: int, *, min_overlap: int = 1
) -> float:
    """nDCG@k with binary relevance: DCG = sum of rel_i / log2(i + 1) over ranks i <= k, divided by
    the DCG of the ideal order of the same top k (its relevant chunks first); 0 with none relevant.

    How many chunks of the index overlap a reference depends on the chunker and is not known
    here, so the ideal is the top k reordered: nDCG@k says how early the relevant chunks come,
    recall@k says how much of the answer they hold.
    """
    rel = relevance_at_k(retrieved, references, k, min_overlap=min_overlap)
    found = sum(rel)
    if found == 0:
        return 0.0
    dcg = sum(r / math.log2(rank + 1) for rank, r in enumerate(rel, start=1))
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, found + 1))
    return dcg / ideal


def average_precision_at_k(
    retrieved: Sequence[Span], references: Sequence[Span], k: int, *, min_overlap: int = 1
) -> float:
    """AP@k with binary relevance: the mean of precision@i over the ranks i <= k of the relevant
    chunks (normalised by the relevant chunks in the top k, as nDCG@k is); 0 with none relevant.
    Its mean over questions is MAP@k."""
    rel = relevance_at_k(retrieved, references, k, min_overlap=min_overlap)
    hits = 0
    total = 0.0
    for rank, r in enumerate(rel, start=1):
        if r:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


def recall(retrieved: Sequence[Span], references: Sequence[Span]) -> float:
    """Fraction of the references' characters covered by the retrieved spans."""
    refs = union_by_doc(references)
    denominator = total_length(refs)
    if denominator == 0:
        return 0.0
    return intersection_length(union_by_doc(retrieved), refs) / denominator


def union_precision_iou(retrieved: Sequence[Span], references: Sequence[Span]) -> tuple[float, float]:
    """Precision |U∩R|/|U| and IoU |U∩R|/|U∪R| with U, R the character sets (overlap counted once)."""
    got = union_by_doc(retrieved)
    refs = union_by_doc(references)
    inter = intersection_length(got, refs)
    got_len, ref_len = total_length(got), total_length(refs)
    precision = inter / got_len if got_len else 0.0
    union_len = got_len + ref_len - inter
    return precision, (inter / union_len if union_len else 0.0)


def chroma_scores(retrieved: Sequence[Span], references: Sequence[Span]) -> tuple[float, float, float]:
    """(recall, precision, IoU) exactly as Chroma's evaluation code computes them for one question.

    numerator = characters of the union of (chunk ∩ reference) over retrieved chunks of the
                question's corpus
    recall    = numerator / Σ |reference|
    precision = numerator / Σ |chunk|                  (every retrieved chunk, any corpus, overlaps
                                                        counted as often as they occur)
    IoU       = numerator / (Σ |chunk| + Σ |reference \\ retrieved|)
    A question with nothing retrieved scores 0 (their code would divide by zero).
    """
    refs = [r for r in references]
    got = union_by_doc(retrieved)
    numerator = intersection_length(got, union_by_doc(refs))
    reference_sum = sum(r.length for r in refs)
    chunk_sum = sum(s.length for s in retrieved)
    unused = sum(r.length - _intersect_sorted([(r.start, r.end)], got.get(r.doc_id, [])) for r in refs)
    rec = numerator / reference_sum if reference_sum else 0.0
    prec = numerator / chunk_sum if chunk_sum else 0.0
    iou_denominator = chunk_sum + unused
    return rec, prec, (numerator / iou_denominator if iou_denominator else 0.0)


def take_within_budget(token_counts: Sequence[int], budget: int) -> int:
    """How many chunks, in rank order, fit in `budget` tokens (stops at the first that does not fit)."""
    used = taken = 0
    for count in token_counts:
        if used + count > budget:
            break
        used += count
        taken += 1
    return taken


def _best_set(question_sets: list[list[Span]], retrieved: Sequence[Span]) -> list[Span]:
    """The reference set the retrieval matches best (max recall, then union IoU)."""
    if len(question_sets) == 1:
        return question_sets[0]
    return max(
        question_sets, key=lambda refs: (recall(retrieved, refs), union_precision_iou(retrieved, refs)[1])
    )


def score_question(
    question: Question,
    retrieved: Sequence[SpanLike | Span],
    *,
    k: int = DEFAULT_K,
    min_overlap: int = 1,
    token_counts: Sequence[int] | None = None,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    failure_k: int = FAILURE_K,
    trimmed: Mapping[int, Sequence[SpanLike | Span]] | None = None,
) -> dict[str, float]:
    """Every metric for one question. `retrieved` is rank-ordered and may be longer than k
    (recall@failure_k and budget recall use the longer list; pass at least failure_k items).
    `trimmed[budget]`: what a search with `max_context_tokens=budget` returned (whole results, then
    each later one cut to its best sentences), scored as `trimmed_recall_{budget}`.

    Keys use the literal k: `hit_at_5`, `mrr_at_5`, `ndcg_at_5`, `map_at_5`, `recall_at_5`, `precision_at_5`,
    `iou_at_5`, `chroma_recall_at_5`, `chroma_precision_at_5`, `chroma_iou_at_5`,
    `recall_at_20`, `failure_rate_at_20`, `budget_recall_1024`, `budget_chunks_1024`, ...
    and, with `token_counts`, `context_tokens_at_5` (tokens of the top k: what the LLM reads).
    """
    spans = [as_span(r) for r in retrieved]
    top = spans[:k]
    all_refs = question.all_reference_spans()
    sets = question.reference_sets()
    best = _best_set(sets, top)
    precision, iou = union_precision_iou(top, best)
    c_recall, c_precision, c_iou = chroma_scores(top, best)
    scores = {
        f"hit_at_{k}": hit_at_k(top, all_refs, k, min_overlap=min_overlap),
        f"mrr_at_{k}": reciprocal_rank_at_k(top, all_refs, k, min_overlap=min_overlap),
        f"ndcg_at_{k}": ndcg_at_k(top, all_refs, k, min_overlap=min_overlap),
        f"map_at_{k}": average_precision_at_k(top, all_refs, k, min_overlap=min_overlap),
        f"recall_at_{k}": recall(top, best),
        f"precision_at_{k}": precision,
        f"iou_at_{k}": iou,
        f"chroma_recall_at_{k}": c_recall,
        f"chroma_precision_at_{k}": c_precision,
        f"chroma_iou_at_{k}": c_iou,
    }
    if failure_k and failure_k != k:
        deep = spans[:failure_k]
        deep_recall = recall(deep, _best_set(sets, deep))
        scores[f"recall_at_{failure_k}"] = deep_recall
        scores[f"failure_rate_at_{failure_k}"] = 1.0 - deep_recall
    if token_counts is not None:
        if len(token_counts) != len(spans):
            raise ValueError(f"token_counts has {len(token_counts)} entries for {len(spans)} retrieved spans")
        scores[f"context_tokens_at_{k}"] = float(sum(token_counts[:k]))
        for budget in budgets:
            taken = take_within_budget(token_counts, budget)
            within = spans[:taken]
            scores[f"budget_recall_{budget}"] = recall(within, _best_set(sets, within)) if within else 0.0
            scores[f"budget_chunks_{budget}"] = float(taken)
    for budget, results in (trimmed or {}).items():
        cut = [as_span(r) for r in results]
        scores[f"trimmed_recall_{budget}"] = recall(cut, _best_set(sets, cut)) if cut else 0.0
    return scores


# ---------------------------------------------------------------------------
# Aggregation: means, bootstrap confidence intervals, per-corpus breakdowns
# ---------------------------------------------------------------------------


@dataclass
class MetricSummary:
    """Per-question scores of one retrieval run, their means with CIs, and per-corpus means."""

    # The scores the means came from: kept in memory for paired comparisons, not serialised
    # (a stored summary holds means, CIs and per-corpus means), so not part of equality.
    per_question: dict[str, dict[str, float]] = field(compare=False, repr=False)
    corpus_of: dict[str, str | None] = field(compare=False, repr=False)
    overall: dict[str, Estimate] = field(default_factory=dict)
    by_corpus: dict[str, dict[str, float]] = field(default_factory=dict)
    n_questions: int = -1  # set from per_question when not given

    def __post_init__(self) -> None:
        if self.n_questions < 0:
            self.n_questions = len(self.per_question)

    def means(self) -> dict[str, float]:
        return {name: est.mean for name, est in self.overall.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            "n_questions": self.n_questions,
            "overall": {name: est.as_dict() for name, est in self.overall.items()},
            "by_corpus": {
                corpus: {name: json_float(value) for name, value in values.items()}
                for corpus, values in self.by_corpus.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricSummary:
        """A summary read back from `as_dict()` (without per-question scores)."""
        for key in ("n_questions", "overall", "by_corpus"):
            if key not in data:
                raise ValueError(f"metric summary: missing field {key!r}")
        return cls(
            per_question={},
            corpus_of={},
            overall={name: Estimate.from_dict(est) for name, est in data["overall"].items()},
            by_corpus={
                corpus: {name: float_or_nan(value) for name, value in values.items()}
                for corpus, values in data["by_corpus"].items()
            },
            n_questions=int(data["n_questions"]),
        )


def summarize(
    per_question: Mapping[str, Mapping[str, float]],
    corpus_of: Mapping[str, str | None],
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> MetricSummary:
    """Means with bootstrap CIs (each metric resampled with the same seed) and per-corpus means."""
    ids = list(per_question)
    names: list[str] = []
    for qid in ids:
        for name in per_question[qid]:
            if name not in names:
                names.append(name)
    summary = MetricSummary({q: dict(per_question[q]) for q in ids}, {q: corpus_of.get(q) for q in ids})
    for name in names:
        values = [per_question[q][name] for q in ids if name in per_question[q]]
        summary.overall[name] = bootstrap_ci(
            values, n_resamples=n_resamples, confidence=confidence, seed=seed
        )
    corpora: dict[str, list[str]] = {}
    for qid in ids:
        label = corpus_of.get(qid)
        if label is not None:
            corpora.setdefault(label, []).append(qid)
    for label, qids in corpora.items():
        summary.by_corpus[label] = {
            name: float(np.mean([per_question[q][name] for q in qids if name in per_question[q]]))
            for name in names
        } | {"n_questions": float(len(qids))}
    return summary


def score_questions(
    questions: Sequence[Question],
    retrievals: Sequence[Sequence[SpanLike | Span]],
    *,
    k: int = DEFAULT_K,
    min_overlap: int = 1,
    token_counter: Callable[[Any], int] | None = None,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    failure_k: int = FAILURE_K,
    n_resamples: int = 2000,
    seed: int = 0,
    trimmed: Mapping[int, Sequence[Sequence[SpanLike | Span]]] | None = None,
) -> MetricSummary:
    """Score a whole run. `token_counter(item)` gives each retrieved item's tokens for budget recall;
    `trimmed[budget]` holds, per question, what a search with that `max_context_tokens` returned."""
    if len(questions) != len(retrievals):
        raise ValueError(f"{len(questions)} questions but {len(retrievals)} result lists")
    per_question: dict[str, dict[str, float]] = {}
    for i, (question, retrieved) in enumerate(zip(questions, retrievals, strict=True)):
        counts = [token_counter(item) for item in retrieved] if token_counter else None
        per_question[question.id] = score_question(
            question,
            retrieved,
            k=k,
            min_overlap=min_overlap,
            token_counts=counts,
            budgets=budgets,
            failure_k=failure_k,
            trimmed={budget: lists[i] for budget, lists in (trimmed or {}).items()},
        )
    return summarize(per_question, {q.id: q.corpus for q in questions}, n_resamples=n_resamples, seed=seed)
