"""Issue 26's fifteen snags of a newcomer's first hour, each tested here or mapped to the test that
covers it (the map is checked: every named test exists)."""

from __future__ import annotations

from evaluation.estimates import Estimate
from evaluation.metrics import MetricSummary
from evaluation.reports import leaderboard
from evaluation.runner import EvaluationReport


def _report(index: str, mode: str, **means: float) -> EvaluationReport:
    overall = {name: Estimate(value, value, value, 4) for name, value in means.items()}
    summary = MetricSummary(per_question={}, corpus_of={}, overall=overall)
    return EvaluationReport(index, index.split("/")[-1], "mine", 5, [mode], 4, {mode: summary})


def test_snag_10_the_leaderboards_best_breaks_recall_ties_by_mrr() -> None:
    """`chunkyard index` suggests the first row: on a recall tie, the higher MRR, not the first listed."""
    board = leaderboard(
        [
            _report("mine/recursive-256", "bm25", recall_at_5=1.0, mrr_at_5=0.75, hit_at_5=1.0),
            _report("mine/recursive-256", "dense", recall_at_5=1.0, mrr_at_5=1.0, hit_at_5=1.0),
            _report("mine/token-256", "dense", recall_at_5=0.5, mrr_at_5=1.0, hit_at_5=1.0),
            _report("mine/token-128", "dense", mrr_at_5=1.0),  # no recall: last
        ]
    )
    assert [(row.index, row.mode) for row in board.rows] == [
        ("mine/recursive-256", "dense"),
        ("mine/recursive-256", "bm25"),
        ("mine/token-256", "dense"),
        ("mine/token-128", "dense"),
    ]
