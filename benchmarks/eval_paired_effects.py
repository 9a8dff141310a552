"""Paired effect of Searcher options on chroma_general: per-question differences with a bootstrap CI.

    python -m benchmarks.eval_paired_effects chroma_general/eval-recursive-150-hw '{}' \
        '[{"collapse_duplicates": true}, {"context_weight": 0.45, "context_neighbours": 2}]'

The index must be built (e.g. by `chunkyard eval --config NAME`). Every run asks the Searcher
(`hybrid_weighted`, top 5, in-memory BM25) for all 472 questions with the base options, then with
each lever added, and reports recall and IoU (Chroma's definitions) with 95% percentile-bootstrap
intervals and the paired difference (the same questions with and without the lever), whose
interval is much narrower than the difference of two independent intervals.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from chunkyard.evaluation.datasets import load_dataset
from chunkyard.evaluation.estimates import Estimate, bootstrap_ci
from chunkyard.evaluation.metrics import score_question

METRICS = ("chroma_recall_at_5", "chroma_iou_at_5", "hit_at_5", "mrr_at_5")


def _scores(
    searcher: Any, index: str, questions: list[Any], options: dict[str, Any]
) -> dict[str, np.ndarray]:
    results = searcher.search_batch(
        [q.text for q in questions], index, k=5, mode="hybrid_weighted", **options
    )
    rows = [score_question(q, r, k=5, failure_k=0) for q, r in zip(questions, results, strict=True)]
    return {m: np.array([row[m] for row in rows]) for m in METRICS}


def _pct(est: Estimate) -> str:
    return f"{100 * est.mean:.1f} [{100 * est.low:.1f}, {100 * est.high:.1f}]"


def main(argv: list[str]) -> int:
    from chunkyard.retrieval.embedders.embedder import embedder_for_config
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import load_index_configs
    from chunkyard.retrieval.store import Store

    index, base, levers = argv[0], json.loads(argv[1]), json.loads(argv[2])
    duplicates = argv[3] if len(argv) > 3 else "first"
    questions = load_dataset("chroma_general", duplicates=duplicates).questions
    config = load_index_configs()[index.split("/", 1)[1]]
    searcher = Searcher(Store(), embedder_for_config(config), bm25_backend="memory")
    before = _scores(searcher, index, questions, base)
    print(
        f"{index} ({duplicates}) base {base}: recall {_pct(bootstrap_ci(before['chroma_recall_at_5']))}, "
        f"IoU {_pct(bootstrap_ci(before['chroma_iou_at_5']))}",
        flush=True,
    )
    for lever in levers:
        after = _scores(searcher, index, questions, {**base, **lever})
        delta_recall = bootstrap_ci(after["chroma_recall_at_5"] - before["chroma_recall_at_5"])
        delta_iou = bootstrap_ci(after["chroma_iou_at_5"] - before["chroma_iou_at_5"])
        print(
            f"  + {lever}: recall {_pct(bootstrap_ci(after['chroma_recall_at_5']))}, "
            f"IoU {_pct(bootstrap_ci(after['chroma_iou_at_5']))}, hit@5 {100 * after['hit_at_5'].mean():.1f}, "
            f"MRR@5 {100 * after['mrr_at_5'].mean():.1f} | Δrecall {_pct(delta_recall)}, Δiou {_pct(delta_iou)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
