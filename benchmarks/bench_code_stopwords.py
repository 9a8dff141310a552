"""Stop words in a mixed folder with code (issue 38): do a question's function words, or words every code
file repeats, give a code file its score?

Corpus: the demo collection (docs/*.md) and, for the mixed folder, the same docs plus this repository's
chunking/documents/*.py. Questions: the demo set (evaluation/datasets/demo_questions.jsonl); all are
about the docs, so a code file in the top 2 is an unrelated hit. Each setup is indexed in the real
Postgres with the real model (recursive 256, hybrid): with `analyzer: auto` (English here, so code is
analysed with English stop words) and with `analyzer: standard` (what `auto` picks as the main analyzer
of a folder mostly in a language without a stop-word list, CJK for one: code was then analysed
keeping "what", "is", "the"). Each is indexed twice, side by side in one run: before (code chunks'
terms as the main analyzer gives them) and after (`retrieval.lexical.code_terms`: English stop words dropped
from code chunks' terms). Reported per search mode: hit@5 (the question's document in the top 5) and
the number of questions with a code file in their top 2.

    python -m benchmarks.bench_code_stopwords   # one JSON line per setup, variant and mode
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from pathlib import Path

from chunkyard.chunking.documents.folder import load_folder
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.retrieval.indexing import bm25 as terms_module
from chunkyard.retrieval.lexical.code_terms import code_terms
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = REPO / "evaluation" / "datasets" / "demo_questions.jsonl"


def _keep_stop_words(terms: list[str]) -> list[str]:
    return terms  # "before": code chunks' terms as the main analyzer gives them


def mixed_folder(work: Path) -> Path:
    """docs/ with chunking/documents/'s Python files beside it: a folder of prose and code."""
    mixed = work / "mixed"
    shutil.copytree(REPO / "docs", mixed)
    for path in sorted((REPO / "chunking" / "documents").glob("*.py")):
        shutil.copy(path, mixed / path.name)
    return mixed


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-code-stop-"))
    mixed = mixed_folder(work)
    store = Store(embedded_database_url(work / "pg"))
    store.migrate()
    embedder = load_embedder("all-MiniLM-L6-v2")
    searcher = Searcher(store, embedder)
    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line]
    setups = (("mixed", mixed, "auto"), ("mixed-standard", mixed, "standard"))  # docs/ alone: no code
    for (name, folder, analyzer), label in itertools.product(setups, ("before", "after")):
        terms_module.code_terms = _keep_stop_words if label == "before" else code_terms
        documents, _ = load_folder(folder, ["**/*.md", "**/*.py"])
        spec = IndexSpec(
            f"{name}-{label}",
            IndexConfig(
                name="bench",
                chunker={"strategy": "recursive", "size": 256, "tokenizer": "model"},
                bm25={"analyzer": analyzer},
                hybrid={"fusion": "rrf", "rrf_k": 60, "candidates": 50},
            ),
        )
        store.documents.sync(spec.collection, documents, [])
        build_index(store, spec, embedder)
        for mode in ("bm25", "hybrid"):
            hits = code_top2 = 0
            for question in questions:
                results = searcher.search(question["question"], str(spec.name), k=5, mode=mode)
                expected = {ref["document"] for ref in question["references"]}
                hits += any(r.doc_id in expected for r in results)
                code_top2 += any(r.doc_id.endswith(".py") for r in results[:2])
            row = {
                "label": label,
                "folder": name,
                "mode": mode,
                "questions": len(questions),
                "hit_at_5": round(hits / len(questions), 3),
                "code_in_top_2": code_top2,
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
