"""A context budget in cl100k tokens: whole results in rank order (what fits) against `max_context_tokens`
(whole, then best sentences), per language.

tests/data/multilingual (the same six short articles and 12 questions in en/es/hi/th), one
multilingual-e5-small (ONNX int8) index per language, recursive chunks of 64 model tokens, served
mode, k=5 (`BENCH_LANGUAGES="hi th"` runs a subset). For each budget: the share of questions whose
reference is inside the returned text (character recall of the reference >= 0.5: "found") and the
mean character recall of the reference, for (a) the top results kept whole while they fit (the
evaluation's budget recall), (b) `max_context_tokens`, and (c) the same trimming before it started
from the first highlight (the sentence with the most query terms, unweighted).
Writes `benchmarks/results/context_budget.json`.

    python -m benchmarks.bench_context_budget
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT / "tests" / "data" / "multilingual"
RESULTS = REPO_ROOT / "benchmarks" / "results" / "context_budget.json"
LANGUAGES = tuple(os.environ.get("BENCH_LANGUAGES", "en es hi th").split())
BUDGETS = (64, 128, 256)


def _recall(spans: list[tuple[str, int, int]], doc: str, start: int, end: int) -> float:
    covered = set()
    for doc_id, s, e in spans:
        if doc_id == doc:
            covered.update(range(max(s, start), min(e, end)))
    return len(covered) / (end - start)


def main() -> None:
    from chunkyard.chunking.e5_model import MODEL_NAME
    from chunkyard.chunking.tokenizers import get_tokenizer
    from chunkyard.chunking.types import Document
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.query.budget import fit_to_budget
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import embedded_database_url

    cl100k = get_tokenizer("cl100k_base")
    store = Store(embedded_database_url(tempfile.mkdtemp(prefix="chunkyard-budget-")))
    store.migrate()
    embedder = load_embedder(MODEL_NAME, backend="onnx", quantize="int8")
    searcher = Searcher(store, embedder)
    rows = []
    for language in LANGUAGES:
        docs = [
            Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / language).glob("*.md"))
        ]
        texts = {d.id: d.text for d in docs}
        config = IndexConfig(
            name="recursive-64-e5",
            chunker={"strategy": "recursive", "size": 64, "overlap": 0, "tokenizer": "model"},
            embedding_model=MODEL_NAME,
            embedder={"backend": "onnx", "quantize": "int8"},
            bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "auto"},
        )
        spec = IndexSpec(f"budget-{language}", config)
        store.documents.sync(spec.collection, docs, [])
        build_index(store, spec, embedder)
        searcher.warm(spec.name)
        records = [json.loads(line) for line in (DATA / f"{language}_questions.jsonl").open(encoding="utf-8")]
        for budget in BUDGETS:
            found = {"whole": 0, "trimmed_before": 0, "trimmed": 0}
            recall = {"whole": 0.0, "trimmed_before": 0.0, "trimmed": 0.0}
            for record in records:
                ref = record["references"][0]
                start = texts[ref["document"]].index(ref["text"])
                end = start + len(ref["text"])
                results = searcher.search(record["question"], spec.name, k=5)
                whole, used = [], 0
                for r in results:
                    count = cl100k.count(r.text)
                    if used + count > budget:
                        break
                    whole.append((r.doc_id, r.start, r.end))
                    used += count
                trimmed = [
                    (r.doc_id, r.start, r.end)
                    for r in searcher.search(record["question"], spec.name, k=5, max_context_tokens=budget)
                ]
                # before the highlights seeded the trimming: the sentence with the most query terms
                plain = copy.deepcopy(results)
                for r in plain:
                    r.highlights = []
                analyzer = searcher._handle(spec.name).analyzer  # the index's own BM25 analyzer
                trimmed_before = [
                    (r.doc_id, r.start, r.end)
                    for r in fit_to_budget(plain, record["question"], analyzer, budget, cl100k)
                ]
                for name, spans in (
                    ("whole", whole),
                    ("trimmed_before", trimmed_before),
                    ("trimmed", trimmed),
                ):
                    value = _recall(spans, ref["document"], start, end)
                    recall[name] += value
                    found[name] += value >= 0.5
            n = len(records)
            row = {
                "language": language,
                "budget": budget,
                "questions": n,
                **{f"{name}_found": round(100 * found[name] / n, 1) for name in found},
                **{f"{name}_char_recall": round(100 * recall[name] / n, 1) for name in recall},
            }
            rows.append(row)
            print(row, flush=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    RESULTS.write_text(json.dumps({"uptime": load, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    print(load)


if __name__ == "__main__":
    main()
