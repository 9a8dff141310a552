"""Adaptive granularity and context scoring: what the best rankings cost per query against plain hybrid.

    python -m benchmarks.bench_adaptive [INDEX_CONFIG] [--rounds N]

Asks the Searcher (`hybrid_weighted`, in-memory BM25, one question at a time) for every
chroma_general question in four settings of the same index: plain hybrid_weighted (context
scoring, collapsing and the fallback off), context scoring alone (the `-ctx` ranking:
`coarse_min_gap` 0), and the config itself (context scoring plus the coarse fallback), its coarse
search run after the fine ranking or beside it (`searcher.SPECULATE_MAX_QUERIES`). Every question
goes through all four in turn (the order rotating from question to question), so all see the same
machine state; twice: with the query embedding (what a caller waits for) and with the query vectors
computed beforehand (the search alone). Writes `benchmarks/results/adaptive.md` and `.json`: p50/p95
per setting and pass, p95 against plain, and the share of questions the coarse index answers, per
corpus. The index must be built (e.g. by `chunkyard eval --config INDEX_CONFIG`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from chunkyard.evaluation.datasets import load_dataset

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    from chunkyard.retrieval.embedders.embedder import embedder_for_config
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.query import searcher as searcher_module
    from chunkyard.retrieval.settings.config import load_index_configs
    from chunkyard.retrieval.store import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="eval-recursive-150-adaptive")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the questions per pass")
    args = parser.parse_args(argv)
    config = load_index_configs()[args.config]
    if not config.coarse:
        parser.error(f"{args.config} has no `coarse` setting")
    questions = load_dataset("chroma_general").questions
    index = f"chroma_general/{args.config}"
    embedder = embedder_for_config(config)
    searcher = Searcher(Store(), embedder, bm25_backend="memory")
    texts = [q.text for q in questions]
    vectors = embedder.embed(texts)
    searcher.search_batch(texts[:50], index, k=5, mode="hybrid_weighted")  # warm caches
    min_gap = config.coarse["min_gap"]
    plain = {"context_weight": 0.0, "focus_weight": 0.0, "collapse_duplicates": False, "coarse_min_gap": 0.0}
    settings: dict[str, tuple[dict[str, float | bool], int]] = {
        "plain hybrid_weighted": (plain, 0),
        "context scoring (-ctx)": ({"coarse_min_gap": 0.0}, 0),
        f"adaptive (min_gap {min_gap}), coarse after the fine ranking": ({"coarse_min_gap": min_gap}, 0),
        f"adaptive (min_gap {min_gap}), coarse beside the fine ranking": ({"coarse_min_gap": min_gap}, 1),
    }
    names = list(settings)
    for name in names:  # warm every path (coarse index handle, statistics)
        overrides, speculate = settings[name]
        searcher_module.SPECULATE_MAX_QUERIES = speculate
        for qi in range(20):
            searcher.search(texts[qi], index, k=5, mode="hybrid_weighted", **overrides)
    load_before = os.getloadavg()
    passes = {"with the query embedding": True, "query vectors given": False}
    latencies = {p: {name: [] for name in names} for p in passes}
    shares: dict[str, list[bool]] = {}
    for pass_name, embed in passes.items():
        for _ in range(args.rounds):
            for qi, question in enumerate(questions):
                for name in names[qi % len(names) :] + names[: qi % len(names)]:
                    overrides, speculate = settings[name]
                    searcher_module.SPECULATE_MAX_QUERIES = speculate
                    given = None if embed else vectors[qi : qi + 1]
                    started = time.perf_counter()
                    results = searcher.search_batch(
                        [question.text], index, k=5, mode="hybrid_weighted", query_vectors=given, **overrides
                    )[0]
                    latencies[pass_name][name].append((time.perf_counter() - started) * 1000)
                    if "after" in name and embed and len(latencies[pass_name][name]) <= len(questions):
                        shares.setdefault(question.corpus or "all", []).append(results[0].index != index)
    searcher_module.SPECULATE_MAX_QUERIES = 0
    load_after = os.getloadavg()
    summary = {
        pass_name: {
            name: {"p50_ms": float(np.median(values)), "p95_ms": float(np.percentile(values, 95))}
            for name, values in by_setting.items()
        }
        for pass_name, by_setting in latencies.items()
    }
    share = {corpus: float(np.mean(flags)) for corpus, flags in sorted(shares.items())}
    overall = float(np.mean([flag for flags in shares.values() for flag in flags]))
    payload = {"index": index, "questions": len(questions), "rounds": args.rounds, "passes": summary}
    payload.update(coarse_share=share, coarse_share_overall=overall)
    payload["load_average"] = {"before": list(load_before), "after": list(load_after)}
    payload["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adaptive.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    lines = [
        f"# Context scoring and adaptive granularity on `{index}`",
        "",
        f"{len(questions)} chroma_general questions, one at a time, `hybrid_weighted`, in-memory BM25; each "
        f"question through the four settings in turn (rotating order), {args.rounds} rounds per pass. "
        f"Measured {payload['measured_at']}. Load average (1/5/15 min, {os.cpu_count()} cores) before: "
        + " ".join(f"{v:.2f}" for v in load_before)
        + ", after: "
        + " ".join(f"{v:.2f}" for v in load_after)
        + ".",
    ]
    for pass_name, by_setting in summary.items():
        base = by_setting["plain hybrid_weighted"]["p95_ms"]
        lines += ["", f"## {pass_name.capitalize()}", "", "| setting | p50 ms | p95 ms | p95 vs plain |"]
        lines.append("|---|---:|---:|---:|")
        for name, values in by_setting.items():
            ratio = values["p95_ms"] / base
            lines.append(f"| {name} | {values['p50_ms']:.1f} | {values['p95_ms']:.1f} | {ratio:.2f}x |")
    lines += ["", f"Answered by the coarse index: {100 * overall:.1f}% of the questions."]
    lines += [f"- {corpus}: {100 * value:.1f}%" for corpus, value in share.items()]
    (RESULTS / "adaptive.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
