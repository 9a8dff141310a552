"""Long-document levers side by side: fusion that trusts a confirmed dense top hit, BM25 pseudo-relevance
feedback, small-to-big sections, and budget trimming seeded by the highlights.

The collection is the demo's (docs/). Three question sets: the long-document set
(benchmarks/data/long_documents_questions.jsonl, 20 exact phrases over the longest docs), a
paraphrased one (long_documents_paraphrased.jsonl, 20 questions in other words than their answer)
and the demo's (38). Each lever is measured before and after in the same run, on the same indexes:

- fusion: `hybrid_auto` with `trust_dense` off (the calibrated weight alone: before) and on, on
  recursive-256 with all-MiniLM-L6-v2 and with multilingual-e5-small;
- feedback: served and BM25 with `bm25_feedback` off and on, both models;
- sections: recursive-128 (MiniLM) widened with `section_tokens` 256 and 512, against recursive-256
  and recursive-128 as they are;
- budget trimming: the served top 5 trimmed to 128 and 256 cl100k tokens, from the same results,
  by the sentence with the most query terms (before) and from the first highlight, idf-weighted
  (after): reference found (half its characters or more returned) and its mean character recall.

hit@5, MRR@5 and recall within 1,024 cl100k tokens (whole results in rank order) per row. Writes
`benchmarks/results/long_levers.json`; long_documents.md is written by hand from it.

    python -m benchmarks.bench_long_levers [DB_FOLDER]   # an existing folder reuses its indexes
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "long_levers.json"
DATA = REPO_ROOT / "benchmarks" / "data"
SETS = {
    "long": DATA / "long_documents_questions.jsonl",
    "paraphrased": DATA / "long_documents_paraphrased.jsonl",
}
MODELS = ("recursive-256", "recursive-256-multilingual")
BUDGETS = (128, 256)


def _metrics(report: Any, variant: str) -> dict[str, float]:
    m = report.metrics[variant]
    return {name: round(100 * m[name], 1) for name in ("hit_at_5", "mrr_at_5", "budget_recall_1024")}


def _char_recall(results: list[Any], question: Any) -> float:
    """The share of the question's reference characters inside the returned spans."""
    total = covered = 0
    for ref in question.references:
        total += ref.end - ref.start
        seen: set[int] = set()
        for r in results:
            if r.doc_id == ref.doc_id:
                seen.update(range(max(r.start, ref.start), min(r.end, ref.end)))
        covered += len(seen)
    return covered / total if total else 0.0


def main() -> None:
    from chunkyard.chunking.tokenizers import get_tokenizer
    from chunkyard.evaluation.datasets import load_dataset
    from chunkyard.evaluation.runner import EvaluationRequest, evaluate_index
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.query.budget import fit_to_budget
    from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs
    from chunkyard.retrieval.settings.options import SearchOptions
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import embedded_database_url

    from benchmarks.bench_embedder import load_demo_set

    demo, note = load_demo_set()
    if demo is None:
        raise SystemExit(note)
    sets = {name: load_dataset(path, documents=demo.documents).questions for name, path in SETS.items()}
    sets["demo"] = demo.questions
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="chunkyard-levers-")
    store = Store(embedded_database_url(folder))
    store.migrate()
    configs = load_index_configs()
    rows: list[dict[str, Any]] = []
    cl100k = get_tokenizer("cl100k_base")

    def evaluate(spec: IndexSpec, searcher: Searcher, lever: str, setting: str, variant: str, **options: Any):
        for set_name, questions in sets.items():
            request = EvaluationRequest(
                variants=(variant,), k=5, n_resamples=50, options=SearchOptions(**options)
            )
            report = evaluate_index(searcher, spec, questions, request, store=store)
            row = {"lever": lever, "index": spec.config.name, "setting": setting, "set": set_name}
            row.update(_metrics(report, variant))
            rows.append(row)
            print(row, flush=True)

    for model in MODELS:
        base = configs[model]
        embedder = load_embedder(base.embedding_model, backend="onnx", quantize="int8", batch_size=32)
        searcher = Searcher(store, embedder)
        specs = {"256": IndexSpec("long-demo", base)}
        if model == MODELS[0]:
            small = {**base.chunker, "size": 128}
            specs["128"] = IndexSpec("long-demo", replace(base, name="recursive-128", chunker=small))
        for spec in specs.values():
            store.documents.sync(spec.collection, demo.documents, [])
            build_index(store, spec, embedder)
            searcher.warm(spec.name)
        spec = specs["256"]
        evaluate(spec, searcher, "single lists", "dense", "dense")
        evaluate(spec, searcher, "single lists", "bm25", "bm25")
        for trust, setting in ((False, "calibrated (before)"), (True, "trusted (after)")):
            evaluate(spec, searcher, "fusion", setting, "hybrid_auto", trust_dense=trust)
        for on in (False, True):
            setting = "feedback on" if on else "feedback off"
            evaluate(spec, searcher, "bm25 feedback", setting, "bm25", bm25_feedback=on)
            evaluate(spec, searcher, "bm25 feedback (served)", setting, "hybrid_auto", bm25_feedback=on)
        if "128" in specs:
            evaluate(specs["128"], searcher, "sections", "recursive-128 as is", "hybrid_auto")
            for cap in (256, 512):
                evaluate(
                    specs["128"],
                    searcher,
                    "sections",
                    f"recursive-128, sections {cap}",
                    "hybrid_auto",
                    section_tokens=cap,
                )
            for cap in (256, 512):
                evaluate(
                    spec,
                    searcher,
                    "sections",
                    f"recursive-256, sections {cap}",
                    "hybrid_auto",
                    section_tokens=cap,
                )
            for set_name, questions in sets.items():
                for budget in BUDGETS:
                    score = {"before": [0, 0.0], "after": [0, 0.0]}
                    for question in questions:
                        results = searcher.search(question.text, spec.name, k=5)
                        for name in score:
                            copies = copy.deepcopy(results)
                            if name == "before":
                                for r in copies:
                                    r.highlights = []
                            handle_terms = store_analyzer(searcher, spec)
                            weights = None
                            if name == "after":
                                weights = searcher.lexical.term_weights(
                                    searcher._handle(spec.name), handle_terms.analyze(question.text)
                                )
                            kept = fit_to_budget(copies, question.text, handle_terms, budget, cl100k, weights)
                            value = _char_recall(kept, question)
                            score[name][0] += value >= 0.5
                            score[name][1] += value
                    n = len(questions)
                    for name, (found, recall) in score.items():
                        row = {
                            "lever": "budget trimming",
                            "index": spec.config.name,
                            "setting": f"{name}, {budget} tokens",
                            "set": set_name,
                            "found": round(100 * found / n, 1),
                            "char_recall": round(100 * recall / n, 1),
                        }
                        rows.append(row)
                        print(row, flush=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    RESULTS.write_text(json.dumps({"uptime": load, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    print(load)


def store_analyzer(searcher: Any, spec: Any) -> Any:
    """The index's BM25 analyzer (what the searcher analyses queries with)."""
    return searcher._handle(spec.name).analyzer


if __name__ == "__main__":
    main()
