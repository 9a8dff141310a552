"""Long and many-subject documents from a public set: two of Chroma's corpora split into their articles.

Chroma's general benchmark (`../shared/datasets/chroma_general/`) keeps each corpus as one text. Two of
them are many articles run together, and here each article becomes one document, with the questions'
reference spans rebased onto the article that holds them (a question whose reference crosses two
articles is left out and counted). Nothing is copied into the repository.

- **pubmed**: the first 500,000 characters of the PMC Open Access subset, 15 records (9 articles of
  24-96k characters, 6 short synopses and front matters), each starting at a `PMID:` line; 99
  questions. This is the shape of the issue's held-out long-document set (long scientific articles,
  answers a sentence or more). The records have no clean title (the title runs into the journal
  and subject line), so they are named `pmc-NN`.
- **wikitexts**: the first Wikipedia Good and Featured articles of WikiText, each starting at its
  ` = Title = ` line (a line of that form holding `;` is a statistics table's legend, not a title);
  144 questions. The titles are clean, so this corpus measures context headers.

Each lever is measured before and after in the same run, on the same indexes, with
all-MiniLM-L6-v2 (the default model) and multilingual-e5-small (both ONNX int8), recursive chunks.
On pubmed:
- single lists: dense and BM25 alone, and the share of questions either one's top 5 answers (the
  most a fusion that only reorders the two top 5s can reach; fusion reads 50 candidates per list);
- fusion: served (`hybrid_auto`) as shipped (before) and with `trust_dense`;
- BM25 pseudo-relevance feedback (`bm25_feedback`), served;
- small-to-big: `section_tokens` 256 and 512 on the 256-token index (plain text has no headings, so a
  hit widens within its paper by whole paragraphs);
- context scoring: each candidate also scored by the 5 chunks on each side, and by its best window;
- chunk size: recursive-128 beside recursive-256 (MiniLM).
On wikitexts: context headers (`chunker.context.headers`: the article's title prepended to what each
chunk embeds and indexes) off and on, dense, BM25 and served.

hit@5, MRR@5 and recall within 1,024 cl100k tokens per row. Writes `benchmarks/results/articles.json`;
long_documents.md is written by hand from it.

    python -m benchmarks.bench_articles [DB_FOLDER]   # an existing folder reuses its indexes
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.types import Dataset, Question, Span

from benchmarks.bench_long_levers import _metrics

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "articles.json"
MODELS = ("recursive-256", "recursive-256-multilingual")
# context scoring (retrieval.query.context): the 5 chunks on each side at 0.35, then with the focus window
CONTEXTS = {
    "neighbours 5, weight 0.35": {"context_weight": 0.35, "context_neighbours": 5},
    "the same + focus 0.2": {"context_weight": 0.35, "context_neighbours": 5, "focus_weight": 0.2},
}
# where each article of a corpus starts (group 1, when there is one: its title)
ARTICLE_STARTS = {
    "pubmed": re.compile(r"^PMID: ", re.MULTILINE),
    "wikitexts": re.compile(r"^ = ([^=;\n]+?) = $", re.MULTILINE),
}


def split_articles(corpus: Dataset, corpus_id: str) -> tuple[Dataset, int]:
    """Corpus `corpus_id` of Chroma's set as one document per article, its questions rebased; and how
    many questions were left out (a reference crossing two articles)."""
    whole = next(d for d in corpus.documents if d.id == corpus_id)
    starts = list(ARTICLE_STARTS[corpus_id].finditer(whole.text))
    bounds = list(
        zip([m.start() for m in starts], [*(m.start() for m in starts[1:]), len(whole.text)], strict=True)
    )
    documents = [
        Document(
            id=f"{corpus_id}-{number:02d}.txt",
            text=whole.text[lo:hi],
            title=match.group(1).strip() if match.groups() else f"{corpus_id}-{number:02d}",
            metadata={"article": number},
        )
        for number, (match, (lo, hi)) in enumerate(zip(starts, bounds, strict=True), start=1)
    ]

    def rebased(span: Span) -> Span | None:
        for document, (lo, hi) in zip(documents, bounds, strict=True):
            if lo <= span.start and span.end <= hi:
                return Span(document.id, span.start - lo, span.end - lo)
        return None

    questions, left_out = [], 0
    for question in corpus.questions:
        if question.corpus != corpus_id:
            continue
        spans = [rebased(span) for span in question.references]
        if any(span is None for span in spans):
            left_out += 1
            continue
        questions.append(replace(question, references=spans, alternatives=()))
    return Dataset(f"{corpus_id}-articles", documents, questions), left_out


def either_list(searcher: Any, spec: Any, questions: list[Question]) -> dict[str, Any]:
    """The share of questions dense's or BM25's top 5 hits: the most a reorder of the two top 5s reaches."""
    from chunkyard.evaluation.metrics import hit_at_k

    found = 0
    for question in questions:
        lists = [searcher.search(question.text, spec.name, k=5, mode=mode) for mode in ("dense", "bm25")]
        spans = [[Span(r.doc_id, r.start, r.end) for r in results] for results in lists]
        found += any(hit_at_k(retrieved, question.references, 5) for retrieved in spans)
    hit = round(100 * found / len(questions), 1)
    row = {
        "lever": "single lists",
        "index": spec.config.name,
        "setting": "either top 5",
        "set": spec.collection,
    }
    return {**row, "hit_at_5": hit}


def main() -> None:
    from chunkyard.evaluation.datasets.chroma import load_chroma_general
    from chunkyard.evaluation.runner import EvaluationRequest, evaluate_index
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs
    from chunkyard.retrieval.settings.options import SearchOptions
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import embedded_database_url

    chroma = load_chroma_general()
    corpora: dict[str, Dataset] = {}
    summary: dict[str, dict[str, int]] = {}
    for corpus_id in ARTICLE_STARTS:
        data, left_out = split_articles(chroma, corpus_id)
        corpora[corpus_id] = data
        lengths = sorted(len(d.text) for d in data.documents)
        summary[corpus_id] = {
            "articles": len(data.documents),
            "shortest": lengths[0],
            "longest": lengths[-1],
            "questions": len(data.questions),
            "left_out": left_out,
        }
        print(corpus_id, summary[corpus_id], flush=True)
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="chunkyard-articles-")
    store = Store(embedded_database_url(folder))
    store.migrate()
    configs = load_index_configs()
    rows: list[dict[str, Any]] = []

    def evaluate(spec: IndexSpec, searcher: Searcher, lever: str, setting: str, variant: str, **options: Any):
        data = corpora[spec.collection.removesuffix("-articles")]
        request = EvaluationRequest(
            variants=(variant,), k=5, n_resamples=50, options=SearchOptions(**options)
        )
        report = evaluate_index(searcher, spec, data.questions, request, store=store)
        row = {"lever": lever, "index": spec.config.name, "setting": setting, "set": data.name}
        row.update(_metrics(report, variant))
        rows.append(row)
        print(row, flush=True)

    def built(corpus_id: str, config: Any, searcher: Searcher, embedder: Any) -> IndexSpec:
        spec = IndexSpec(corpora[corpus_id].name, config)
        store.documents.sync(spec.collection, corpora[corpus_id].documents, [])
        build_index(store, spec, embedder)
        searcher.warm(spec.name)
        return spec

    for model in MODELS:
        base = configs[model]
        embedder = load_embedder(base.embedding_model, backend="onnx", quantize="int8", batch_size=32)
        searcher = Searcher(store, embedder)
        spec = built("pubmed", base, searcher, embedder)
        evaluate(spec, searcher, "single lists", "dense", "dense")
        evaluate(spec, searcher, "single lists", "bm25", "bm25")
        rows.append(either_list(searcher, spec, corpora["pubmed"].questions))
        print(rows[-1], flush=True)
        for trust, setting in ((False, "calibrated (before)"), (True, "trust_dense")):
            evaluate(spec, searcher, "fusion", setting, "hybrid_auto", trust_dense=trust)
        evaluate(spec, searcher, "bm25 feedback (served)", "feedback on", "hybrid_auto", bm25_feedback=True)
        for cap in (256, 512):
            evaluate(spec, searcher, "sections", f"sections {cap}", "hybrid_auto", section_tokens=cap)
        for setting, context in CONTEXTS.items():
            evaluate(spec, searcher, "context scoring", setting, "hybrid_auto", **context)
        if model == MODELS[0]:
            small = replace(base, name="recursive-128", chunker={**base.chunker, "size": 128})
            spec = built("pubmed", small, searcher, embedder)
            for variant in ("dense", "bm25", "hybrid_auto"):
                evaluate(spec, searcher, "chunk size", f"recursive-128, {variant}", variant)
        for headers in (False, True):
            chunker = {**base.chunker, "context": {"headers": True}} if headers else base.chunker
            config = replace(base, name=f"{base.name}{'-headers' if headers else ''}", chunker=chunker)
            spec = built("wikitexts", config, searcher, embedder)
            for variant in ("dense", "bm25", "hybrid_auto"):
                setting = f"headers {'on' if headers else 'off'}, {variant}"
                evaluate(spec, searcher, "context headers", setting, variant)
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    RESULTS.write_text(
        json.dumps({"uptime": load, "corpora": summary, "rows": rows}, indent=2) + "\n", encoding="utf-8"
    )
    print(load)


if __name__ == "__main__":
    main()
