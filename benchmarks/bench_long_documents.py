"""Document and section context in each chunk's embedding and BM25 terms (`context: {headers: true}`),
on and off, side by side on long documents.

The collection is the demo's (docs/, one index per config). Two question sets run on it: the demo
set (evaluation/datasets/demo_questions.jsonl) and a long-document set written for this benchmark
(benchmarks/data/long_documents_questions.jsonl: 20 questions, one exact sentence or phrase each,
over the five longest docs, 8-30k characters). Per config: dense / BM25 / served hit@5, MRR@5 and
served recall within a 1,024-token (cl100k) context budget. Writes
`benchmarks/results/long_documents.json`; the Markdown beside it is written by hand from it.

    python -m benchmarks.bench_long_documents
    python -m benchmarks.bench_long_documents --chunkers recursive-128 late-recursive-128 --headers off \
        --output benchmarks/results/long_documents_late.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "long_documents.json"
LONG_SET = REPO_ROOT / "benchmarks" / "data" / "long_documents_questions.jsonl"
CHUNKERS = {
    "recursive-256": {"strategy": "recursive", "size": 256, "overlap": 0, "tokenizer": "model"},
    "markdown-256": {"strategy": "markdown", "size": 256, "overlap": 0, "tokenizer": "model"},
    # late chunking (chunking/chunkers/late.py): recursive pieces of 128 tokens, each vector pooled from
    # the token vectors of a window as long as the model's input (256 for MiniLM), a quarter of it read
    # before the window as context; `recursive-128` is the same pieces embedded alone
    "recursive-128": {"strategy": "recursive", "size": 128, "overlap": 0, "tokenizer": "model"},
    "late-recursive-128": {
        "strategy": "late",
        "base": "recursive",
        "size": 128,
        "overlap": 0,
        "tokenizer": "model",
    },
}
DEFAULT_CHUNKERS = ("recursive-256", "markdown-256")
VARIANTS = ("dense", "bm25", "served")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunkers", nargs="+", choices=sorted(CHUNKERS), default=list(DEFAULT_CHUNKERS))
    parser.add_argument(
        "--headers", choices=("both", "off"), default="both", help="context headers off and on, or off only"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--model", help="the embedding model (default: the default index config's)")
    args = parser.parse_args()
    from chunkyard.evaluation.datasets import load_dataset
    from chunkyard.evaluation.runner import EvaluationRequest, evaluate_index
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs
    from chunkyard.retrieval.settings.names import DEFAULT_CONFIG
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import embedded_database_url

    from benchmarks.bench_embedder import load_demo_set

    demo, note = load_demo_set()
    if demo is None:
        raise SystemExit(note)
    long_set = load_dataset(LONG_SET, documents=demo.documents)
    store = Store(embedded_database_url(tempfile.mkdtemp(prefix="chunkyard-long-")))
    store.migrate()
    base = load_index_configs()[DEFAULT_CONFIG]
    if args.model:
        base = replace(base, embedding_model=args.model)
    embedder = load_embedder(base.embedding_model, backend="onnx", quantize="int8", batch_size=32)
    searcher = Searcher(store, embedder)
    rows: list[dict[str, object]] = []
    for name in args.chunkers:
        chunker = CHUNKERS[name]
        for headers in (False, True) if args.headers == "both" else (False,):
            spec_chunker = {**chunker, "context": {"headers": True}} if headers else chunker
            config = replace(base, name=f"{name}{'-headers' if headers else ''}", chunker=spec_chunker)
            spec = IndexSpec("long-demo", config)
            store.documents.sync(spec.collection, demo.documents, [])
            started = time.perf_counter()
            build_index(store, spec, embedder)
            built = time.perf_counter() - started
            info = store.indexes.info(spec.name)
            for label, questions in (("long documents", long_set.questions), ("demo", demo.questions)):
                report = evaluate_index(
                    searcher,
                    spec,
                    questions,
                    EvaluationRequest(variants=VARIANTS, k=5, n_resamples=200),
                    store=store,
                )
                row: dict[str, object] = {
                    "config": config.name,
                    "headers": headers,
                    "set": label,
                    "questions": len(questions),
                    "chunks": info["chunk_count"] if info else None,
                    "build_s": round(built, 1),
                }
                for variant in VARIANTS:
                    metrics = report.metrics[variant]
                    for metric in ("hit_at_5", "mrr_at_5", "budget_recall_1024"):
                        row[f"{variant}_{metric}"] = round(100 * metrics[metric], 1)
                rows.append(row)
                print(row, flush=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    args.output.write_text(json.dumps({"uptime": load, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    print(load)


if __name__ == "__main__":
    main()
