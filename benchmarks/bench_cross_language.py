"""Fusion for questions in another language than the documents: the served variant against its alternatives.

English questions over each other language's documents of tests/data/multilingual (the same 12
questions in every language, 6 short documents each), and each language's own questions, per model
and chunk size: dense, BM25, RRF (`hybrid`), `hybrid_auto` as it was (its calibrated weight for
every query) and as served now (dense alone when `retrieval.lexical.languages.crosses_languages`). Writes
the "Cross-language fusion" section of benchmarks/results/languages.md and `cross_language.json`.

    python -m benchmarks.bench_cross_language [SIZE ...]   (default 64 32)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

from benchmarks.bench_languages import DATA, RESULTS_DIR, _question_sets
from benchmarks.sections import write_section

LANGUAGES = ("es", "uk", "ar", "hi", "th")  # `id` has articles of its own: no English twin questions
MODELS = ("multilingual-e5-small", "all-MiniLM-L6-v2")
SECTION = "## Cross-language fusion"
VARIANTS = ("dense", "bm25", "hybrid", "auto_before", "served")


def measure(sizes: tuple[int, ...]) -> list[dict[str, object]]:
    """Each model x size x language: build the index once, evaluate every variant on both question sets."""
    import chunkyard.retrieval.query.searcher as searcher_module
    from chunkyard.chunking.types import Document
    from chunkyard.evaluation.runner import SERVED_VARIANT, EvaluationRequest, evaluate_index
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import embedded_database_url

    store = Store(embedded_database_url(tempfile.mkdtemp(prefix="chunkyard-cross-")))
    store.migrate()
    base = load_index_configs()["recursive-256"]
    crosses = searcher_module.crosses_languages
    rows: list[dict[str, object]] = []
    for model in MODELS:
        embedder = load_embedder(model, backend="onnx", quantize="int8", batch_size=32)
        searcher = Searcher(store, embedder)
        for size in sizes:
            config = replace(
                base,
                name=f"recursive-{size}-{model.split('-')[0].lower()}",
                chunker={**base.chunker, "size": size},
                embedding_model=model,
            )
            for language in LANGUAGES:
                documents = [
                    Document(p.name, p.read_text(encoding="utf-8"))
                    for p in sorted((DATA / language).glob("*.md"))
                ]
                spec = IndexSpec(f"cross-{language}", config)
                store.documents.sync(spec.collection, documents, [])
                build_index(store, spec, embedder)
                chunks = (store.indexes.info(spec.name) or {}).get("chunk_count")
                for label, questions in _question_sets(language, documents):
                    hits: dict[str, float] = {}
                    for served_as, crossing in (
                        ("auto_before", lambda query, config: False),
                        ("served", crosses),
                    ):
                        searcher_module.crosses_languages = crossing
                        variants = (
                            ("dense", "bm25", "hybrid", SERVED_VARIANT)
                            if served_as == "served"
                            else (SERVED_VARIANT,)
                        )
                        report = evaluate_index(
                            searcher,
                            spec,
                            questions,
                            EvaluationRequest(variants=variants, k=5, n_resamples=10),
                            store=store,
                        )
                        hits[served_as] = report.metrics[SERVED_VARIANT]["hit_at_5"]
                        hits |= {m: report.metrics[m]["hit_at_5"] for m in variants if m != SERVED_VARIANT}
                    searcher_module.crosses_languages = crosses
                    rows.append({"model": model, "size": size, "set": label, "chunks": chunks, **hits})
                    print(rows[-1], flush=True)
    store.close()
    return rows


def write(rows: list[dict[str, object]]) -> None:
    (RESULTS_DIR / "cross_language.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    lines = [
        SECTION,
        "",
        f"`python -m benchmarks.bench_cross_language`, {time.strftime('%Y-%m-%d', time.gmtime())}, 2-core CPU, "
        f"load average {load.split('load average:')[-1].strip()} at the end. hit@5 (12 questions: one is 8.3 "
        "points); `en->xx`: the English questions over language xx's documents. `auto before`: `hybrid_auto` "
        "with its calibrated weight on every query (the served mode until now); `served`: dense alone when "
        "the question's language is not the documents' and the model is multilingual "
        "(`retrieval.lexical.languages.crosses_languages`; never for all-MiniLM-L6-v2, whose rows must not move).",
        "",
        "| model | size | set | chunks | dense | BM25 | RRF | auto before | served |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = " | ".join(f"{100 * float(row[m]):.1f}" for m in VARIANTS)
        lines.append(f"| {row['model']} | {row['size']} | {row['set']} | {row['chunks']} | {cells} |")
    write_section(RESULTS_DIR / "languages.md", SECTION, lines)
    print("\n".join(lines))


def main() -> None:
    sizes = tuple(int(s) for s in sys.argv[1:] if s.isdigit()) or (64, 32)
    write(measure(sizes))


if __name__ == "__main__":
    main()
