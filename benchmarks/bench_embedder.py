"""Embedder backends side by side: throughput and retrieval quality (torch, ONNX, ONNX int8).

Throughput: chunks/s on 256-token chunks of the Chroma corpora with 2 threads. Quality: the
Chroma general benchmark (472 questions) indexed with `chroma-recursive-250-0` chunking, one index
per backend, evaluated in dense mode (recall@5 = token-level recall of the gold spans in the top 5,
hit@5, MRR@5). The default should be the fastest backend whose recall@5 is within 0.5 points of
torch. Writes `benchmarks/results/embedder.{md,json}`; uses the benchmark database
(CHUNKYARD_HOME/bench-pg or CHUNKYARD_BENCH_DATABASE_URL).

    python -m benchmarks.bench_embedder [--throughput-chunks 128]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
BACKENDS = (("torch", None), ("onnx", None), ("onnx", "int8"))


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--throughput-chunks", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--corpora", default="", help="comma-separated subset of the corpora (smoke runs)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from chunking import build_chunker
    from evaluation.datasets import load_dataset
    from evaluation.runner import evaluate_index
    from retrieval.config import IndexConfig, IndexSpec
    from retrieval.db import chunkyard_home, embedded_database_url
    from retrieval.embedder import Embedder
    from retrieval.indexing import build_index
    from retrieval.query import Searcher
    from retrieval.store import Store

    url = os.environ.get("CHUNKYARD_BENCH_DATABASE_URL") or embedded_database_url(
        chunkyard_home() / "bench-pg"
    )
    store = Store(url)
    store.migrate()
    dataset = load_dataset("chroma_general")
    documents, questions = dataset.documents, dataset.questions
    if args.corpora:
        wanted = set(args.corpora.split(","))
        documents = [d for d in documents if d.id in wanted or d.id.removesuffix(".md") in wanted]
        kept = {d.id for d in documents}
        questions = [q for q in questions if all(ref.doc_id in kept for ref in q.references)]
    window = build_chunker({"strategy": "token", "size": 256, "tokenizer": "model"})
    sample = [c.text for d in documents for c in window.chunk(d)][: args.throughput_chunks]
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {args.threads} threads",
        "questions": len(questions),
        "backends": {},
    }
    reference: np.ndarray | None = None
    collection = "chroma-embedder-bench" + (f"-{args.corpora.replace(',', '-')}" if args.corpora else "")
    store.sync_documents(collection, documents, [])
    for backend, quantize in BACKENDS:
        embedder = Embedder(backend=backend, quantize=quantize, batch_size=32)
        embedder.embed(sample[:8])  # warm-up
        started = time.perf_counter()
        vectors = embedder.embed(sample)
        rate = len(sample) / (time.perf_counter() - started)
        if reference is None:
            reference = vectors
        cosine = float((vectors * reference).sum(axis=1).min())
        log(f"{embedder.model_id}: {rate:.1f} chunks/s (256 tokens), min cosine to torch {cosine:.4f}")
        spec = IndexSpec(
            collection,
            IndexConfig(
                name=f"recursive-250-{embedder.model_id.split('@')[-1].replace('all-MiniLM-L6-v2', 'torch')}",
                chunker={
                    "strategy": "recursive",
                    "size": 250,
                    "overlap": 0,
                    "tokenizer": "cl100k",
                    "preset": "chroma",
                },
                embedder={"backend": backend, **({"quantize": quantize} if quantize else {})},
            ),
        )
        started = time.perf_counter()
        build_index(store, spec, embedder)
        build_s = time.perf_counter() - started
        evaluation = evaluate_index(Searcher(store, embedder), spec, questions, modes=("dense",), k=5)
        metrics = evaluation.metrics["dense"]
        report["backends"][embedder.model_id] = {
            "chunks_per_second_256_tokens": rate,
            "min_cosine_to_torch": cosine,
            "index_build_s": build_s,
            **{key: metrics[key] for key in ("recall_at_5", "hit_at_5", "mrr_at_5") if key in metrics},
        }
        log(
            f"  dense recall@5 {metrics.get('recall_at_5', float('nan')):.4f} hit@5 {metrics.get('hit_at_5', float('nan')):.4f}"
        )
    torch_recall = next(iter(report["backends"].values())).get("recall_at_5", 0.0)
    eligible = [
        (values["chunks_per_second_256_tokens"], name)
        for name, values in report["backends"].items()
        if torch_recall - values.get("recall_at_5", 0.0) < 0.005
    ]
    report["fastest_within_half_a_recall_point"] = max(eligible)[1] if eligible else None
    lines = [
        "# Embedder backends",
        "",
        f"{report['machine']}; throughput on {len(sample)} chunks of 256 model tokens; quality on "
        f"{report['questions']} Chroma questions, chroma-recursive-250-0 chunks, dense mode, k=5.",
        "",
        "| backend | chunks/s | min cosine to torch | recall@5 | hit@5 | MRR@5 |",
        "|---|---|---|---|---|---|",
    ]
    for name, values in report["backends"].items():
        lines.append(
            f"| {name} | {values['chunks_per_second_256_tokens']:.1f} | {values['min_cosine_to_torch']:.4f} | "
            f"{100 * values.get('recall_at_5', float('nan')):.2f} | {100 * values.get('hit_at_5', float('nan')):.2f} | "
            f"{100 * values.get('mrr_at_5', float('nan')):.2f} |"
        )
    lines += [
        "",
        f"Fastest within 0.5 recall points of torch: **{report['fastest_within_half_a_recall_point']}**",
    ]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "embedder.json").write_text(json.dumps(report, indent=2))
    (RESULTS_DIR / "embedder.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
