"""Suggest an index's hybrid fusion weight from its evaluation questions, with an honest held-out score.

The Searcher's `hybrid_weighted` mode mixes min-max-normalised dense and BM25 scores with a
dense weight `w`. This asks the Searcher itself for every candidate `w` (nothing re-implemented),
picks the best on one half of the questions and reports it on the other half, then the reverse
(2-fold), so the suggested weight's score is not measured on the questions that chose it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evaluation.datasets.types import Question
from evaluation.metrics import score_question

DEFAULT_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)


@dataclass
class WeightSuggestion:
    """`weight`: best on all questions; `held_out`: the 2-fold score of choosing it that way."""

    weight: float
    metric: str
    by_weight: dict[float, float]
    held_out: float
    fold_weights: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "metric": self.metric,
            "by_weight": {str(w): v for w, v in self.by_weight.items()},
            "held_out": self.held_out,
            "fold_weights": self.fold_weights,
        }


def suggest_fusion_weight(
    searcher: Any,
    index: str,
    questions: Sequence[Question],
    *,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    k: int = 5,
    metric: str | None = None,
    seed: int = 0,
) -> WeightSuggestion:
    """Score `hybrid_weighted` at each dense weight; `metric` defaults to `recall_at_<k>`."""
    if not questions:
        raise ValueError("suggest_fusion_weight: no questions")
    metric = metric or f"recall_at_{k}"
    texts = [q.text for q in questions]
    per_weight: dict[float, np.ndarray] = {}
    for weight in weights:
        results = searcher.search_batch(texts, index, k, "hybrid_weighted", weight=float(weight))
        per_weight[float(weight)] = np.array(
            [score_question(q, r, k=k, failure_k=0)[metric] for q, r in zip(questions, results, strict=True)]
        )
    by_weight = {w: float(v.mean()) for w, v in per_weight.items()}
    best = max(by_weight, key=lambda w: (by_weight[w], -abs(w - 0.5)))
    order = np.random.default_rng(seed).permutation(len(questions))
    folds = [order[: len(order) // 2], order[len(order) // 2 :]]
    held_out_scores, fold_weights = [], []
    for tune, test in (folds, folds[::-1]):
        chosen = max(per_weight, key=lambda w: (per_weight[w][tune].mean(), -abs(w - 0.5)))
        fold_weights.append(chosen)
        held_out_scores.append(per_weight[chosen][test])
    held_out = float(np.concatenate(held_out_scores).mean())
    return WeightSuggestion(best, metric, by_weight, held_out, fold_weights)
