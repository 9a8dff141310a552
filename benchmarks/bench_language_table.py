"""The issue-16 table on our own Spanish and Indonesian sets: each variant with the English analyzer
and with `analyzer: auto`, hit@5 and recall@5 (writes benchmarks/results/languages_table.md)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.evalset import read_eval_set
from chunkyard.evaluation.runner import SERVED_VARIANT, EvaluationRequest, evaluate_index
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "multilingual"
OUT = Path(__file__).resolve().parent / "results" / "languages_table.md"
VARIANTS = ("dense", "bm25", "hybrid", "hybrid_weighted", SERVED_VARIANT)
SIZES = (48, 256)


def main() -> None:
    store = Store(embedded_database_url(tempfile.mkdtemp(prefix="chunkyard-langtable-")))
    store.migrate()
    embedder = load_embedder("all-MiniLM-L6-v2")
    searcher = Searcher(store, embedder)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# Our multilingual check: English analyzer against `analyzer: auto`",
        "",
        f"Measured {started} by `python -m benchmarks.bench_language_table`: the Spanish and Indonesian",
        "sets of tests/data/multilingual/ (6 short documents and 12 questions each, written for this",
        "project), all-MiniLM-L6-v2 (torch backend), recursive chunks of 48 and 256 model tokens,",
        "top 5. One question is 8.3 points, so only large gaps mean anything.",
        "",
    ]
    for language in ("es", "id"):
        docs = [
            Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / language).glob("*.md"))
        ]
        questions = read_eval_set(DATA / f"{language}_questions.jsonl", docs, on_missing="error").questions
        for size in SIZES:
            rows = {}
            for analyzer in ("english", "auto"):
                config = IndexConfig(
                    name=f"recursive-{size}-{analyzer}",
                    chunker={"strategy": "recursive", "size": size, "overlap": 0, "tokenizer": "model"},
                    bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": analyzer},
                )
                spec = IndexSpec(f"langtable-{language}", config)
                store.documents.sync(spec.collection, docs, [])
                build_index(store, spec, embedder)
                report = evaluate_index(
                    searcher,
                    spec,
                    questions,
                    EvaluationRequest(variants=VARIANTS, k=5, n_resamples=200),
                    store=store,
                )
                resolved = store.indexes.info(spec.name)["config"]["bm25"].get("resolved_analyzer", analyzer)
                rows[analyzer] = (resolved, report.metrics)
            lines += [
                f"## {language}, recursive-{size}",
                "",
                f"| variant | english: hit@5 | english: recall@5 | auto ({rows['auto'][0]}): hit@5 | auto: recall@5 |",
                "|---|---|---|---|---|",
            ]
            for variant in VARIANTS:
                eng, auto = rows["english"][1][variant], rows["auto"][1][variant]
                lines.append(
                    f"| {variant} | {100 * eng['hit_at_5']:.1f} | {100 * eng['recall_at_5']:.1f} | "
                    f"{100 * auto['hit_at_5']:.1f} | {100 * auto['recall_at_5']:.1f} |"
                )
            lines.append("")
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(OUT.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
