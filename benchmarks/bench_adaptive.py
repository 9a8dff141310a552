"""Adaptive granularity: how often the coarse index answers, and what it costs per query.

    python -m benchmarks.bench_adaptive [INDEX_CONFIG] [--rounds N]

Asks the Searcher (`hybrid_weighted`, in-memory BM25, one question at a time, query embedding
included) for every chroma_general question, alternating rounds of plain hybrid_weighted (the same
index with context scoring, collapsing and the fallback off), the config's ranking without the
fallback (`coarse_min_gap` 0) and with the config's threshold, its coarse search run after the fine
ranking (as batches do) and beside it (as single queries do), so all see the same machine state.
Writes `benchmarks/results/adaptive.md` and `.json`: per-round p50/p95, their medians, and the
share of questions answered by the coarse index, per corpus. The index must be built (e.g. by
`chunkyard eval --config INDEX_CONFIG`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from evaluation.datasets import load_dataset

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    from retrieval.config import load_index_configs
    from retrieval.embedder import embedder_for_config
    from retrieval.query import Searcher
    from retrieval.query import searcher as searcher_module
    from retrieval.store import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="eval-recursive-150-adaptive")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each setting, alternated")
    args = parser.parse_args(argv)
    config = load_index_configs()[args.config]
    if not config.coarse:
        parser.error(f"{args.config} has no `coarse` setting")
    questions = load_dataset("chroma_general").questions
    index = f"chroma_general/{args.config}"
    searcher = Searcher(Store(), embedder_for_config(config), bm25_backend="memory")
    searcher.search_batch([q.text for q in questions[:50]], index, k=5, mode="hybrid_weighted")  # warm caches
    min_gap = config.coarse["min_gap"]
    plain = {"context_weight": 0.0, "focus_weight": 0.0, "collapse_duplicates": False, "coarse_min_gap": 0.0}
    settings: dict[str, dict[str, float | bool]] = {
        "plain hybrid_weighted": plain,
        "without fallback": {"coarse_min_gap": 0.0},
        f"min_gap {min_gap}, coarse after the fine ranking": {"coarse_min_gap": min_gap},
        f"min_gap {min_gap}, coarse beside the fine ranking": {"coarse_min_gap": min_gap},
    }
    load_before = os.getloadavg()
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in settings}
    shares: dict[str, list[bool]] = {}
    for _ in range(args.rounds):
        for name, overrides in settings.items():
            searcher_module.SPECULATE_MAX_QUERIES = 0 if "after" in name else 1
            latencies = []
            for question in questions:
                started = time.perf_counter()
                results = searcher.search(question.text, index, k=5, mode="hybrid_weighted", **overrides)
                latencies.append((time.perf_counter() - started) * 1000)
                if "beside" in name and len(rounds[name]) == 0:
                    shares.setdefault(question.corpus or "all", []).append(results[0].index != index)
            rounds[name].append(
                {"p50_ms": float(np.median(latencies)), "p95_ms": float(np.percentile(latencies, 95))}
            )
    load_after = os.getloadavg()
    summary = {
        name: {
            "rounds": values,
            "p50_ms": float(np.median([v["p50_ms"] for v in values])),
            "p95_ms": float(np.median([v["p95_ms"] for v in values])),
        }
        for name, values in rounds.items()
    }
    share = {corpus: float(np.mean(flags)) for corpus, flags in sorted(shares.items())}
    overall = float(np.mean([flag for flags in shares.values() for flag in flags]))
    payload = {"index": index, "questions": len(questions), "settings": summary, "coarse_share": share}
    payload["coarse_share_overall"] = overall
    payload["load_average"] = {"before": list(load_before), "after": list(load_after)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adaptive.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    lines = [
        f"# Adaptive granularity on `{index}`",
        "",
        f"{len(questions)} chroma_general questions, one at a time, `hybrid_weighted`, in-memory BM25,",
        f"query embedding included; {args.rounds} alternated rounds per setting, medians of the rounds.",
        f"Load average (1/5/15 min, {os.cpu_count()} cores) before: "
        + " ".join(f"{v:.2f}" for v in load_before)
        + ", after: "
        + " ".join(f"{v:.2f}" for v in load_after)
        + ".",
        "",
        "| setting | p50 ms | p95 ms | per round (p50 / p95) |",
        "|---|---|---|---|",
    ]
    for name, values in summary.items():
        per_round = ", ".join(f"{r['p50_ms']:.1f} / {r['p95_ms']:.1f}" for r in values["rounds"])
        lines.append(f"| {name} | {values['p50_ms']:.1f} | {values['p95_ms']:.1f} | {per_round} |")
    base = summary["plain hybrid_weighted"]["p95_ms"]
    lines += [
        "",
        "p95 against plain hybrid_weighted: "
        + ", ".join(
            f"{name} {values['p95_ms'] / base:.2f}x"
            for name, values in summary.items()
            if name != "plain hybrid_weighted"
        ),
    ]
    lines += ["", f"Answered by the coarse index: {100 * overall:.1f}% of the questions."]
    lines += [f"- {corpus}: {100 * value:.1f}%" for corpus, value in share.items()]
    (RESULTS / "adaptive.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
