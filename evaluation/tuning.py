"""Suggest an index's search settings from its evaluation questions, with an honest held-out score.

The Searcher's `hybrid_weighted` mode mixes min-max-normalised dense and BM25 scores with a
dense weight `w`. This asks the Searcher itself for every candidate `w` (nothing re-implemented),
picks the best on one half of the questions and reports it on the other half, then the reverse
(2-fold), so the suggested weight's score is not measured on the questions that chose it.
`suggest_search_settings` does the same over a grid of any Searcher options (e.g. the dense
weight with the context weight of `retrieval.query.context`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from chunkyard.evaluation.datasets.types import Question
from chunkyard.evaluation.estimates import Estimate, bootstrap_ci
from chunkyard.evaluation.metrics import score_question

if TYPE_CHECKING:
    from chunkyard.retrieval.query import Searcher

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
    searcher: Searcher,
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
        results = searcher.search_batch(texts, index, k=k, mode="hybrid_weighted", weight=float(weight))
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


@dataclass
class SettingsSuggestion:
    """Search settings chosen on question halves, and what they score on the other halves.

    `settings`: best on all questions (what to ship). `held_out`: each half scored with the
    settings chosen on the other half (2-fold), per reported metric, with a bootstrap CI; this
    is the honest estimate of shipping settings tuned this way. `floors` restrict the choice to
    settings whose tuning-half means reach them (e.g. an IoU floor while maximising recall).
    """

    metric: str
    settings: dict[str, Any]
    by_settings: list[dict[str, Any]]
    held_out: dict[str, Estimate]
    fold_settings: list[dict[str, Any]]
    floors: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "settings": self.settings,
            "floors": self.floors,
            "by_settings": self.by_settings,
            "held_out": {name: est.as_dict() for name, est in self.held_out.items()},
            "fold_settings": self.fold_settings,
        }


def suggest_search_settings(
    searcher: Searcher,
    index: str,
    questions: Sequence[Question],
    grid: dict[str, Sequence[Any]],
    *,
    mode: str = "hybrid_weighted",
    k: int = 5,
    metric: str | None = None,
    report: Sequence[str] | None = None,
    floors: dict[str, float] | None = None,
    seed: int = 0,
    n_resamples: int = 2000,
) -> SettingsSuggestion:
    """Ask the Searcher for every combination of `grid` (Searcher keyword -> values), choose 2-fold.

    E.g. `grid={"weight": [0.2, 0.3], "context_weight": [0.0, 0.3, 0.5]}`; `metric` (default
    `chroma_recall_at_<k>`) is maximised, ties go to the first combination in grid order.
    """
    if not questions:
        raise ValueError("suggest_search_settings: no questions")
    if not grid or any(not values for values in grid.values()):
        raise ValueError("suggest_search_settings: every grid entry needs at least one value")
    metric = metric or f"chroma_recall_at_{k}"
    floors = dict(floors or {})
    reported = list(dict.fromkeys([metric, *(report or ()), *floors]))
    texts = [q.text for q in questions]
    names = list(grid)
    combos = [dict(zip(names, values, strict=True)) for values in itertools.product(*grid.values())]
    per_combo: list[dict[str, np.ndarray]] = []
    for combo in combos:
        results = searcher.search_batch(texts, index, k=k, mode=mode, **combo)
        scores = [score_question(q, r, k=k, failure_k=0) for q, r in zip(questions, results, strict=True)]
        per_combo.append({name: np.array([s[name] for s in scores]) for name in reported})

    def choose(rows: np.ndarray) -> int:
        feasible = [
            i
            for i, values in enumerate(per_combo)
            if all(values[name][rows].mean() >= floor for name, floor in floors.items())
        ]
        candidates = feasible or list(range(len(combos)))
        return max(candidates, key=lambda i: (per_combo[i][metric][rows].mean(), -i))

    everything = np.arange(len(questions))
    best = choose(everything)
    order = np.random.default_rng(seed).permutation(len(questions))
    folds = [order[: len(order) // 2], order[len(order) // 2 :]]
    held_out_values: dict[str, list[np.ndarray]] = {name: [] for name in reported}
    fold_settings = []
    for tune, test in (folds, folds[::-1]):
        chosen = choose(tune)
        fold_settings.append(combos[chosen])
        for name in reported:
            held_out_values[name].append(per_combo[chosen][name][test])
    held_out = {
        name: bootstrap_ci(np.concatenate(parts), n_resamples=n_resamples, seed=seed)
        for name, parts in held_out_values.items()
    }
    by_settings = [
        {"settings": combo, **{name: float(values[name].mean()) for name in reported}}
        for combo, values in zip(combos, per_combo, strict=True)
    ]
    return SettingsSuggestion(metric, combos[best], by_settings, held_out, fold_settings, floors)
