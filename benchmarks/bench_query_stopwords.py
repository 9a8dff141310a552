"""A query's stop words in a folder with code, re-measured (issue 38): which query-side rule, if any,
keeps a question's function words from scoring documents without losing on the demo?

Each setup is indexed once (recursive-256 as configured, with its default embedder) in the real
Postgres with the real model; the rules only change the query's BM25 terms, so every rule is measured
on the same index, side by side in one run:

- `today`: the index's analyzer as it is (English drops its stop words; `standard` keeps them);
- `english`: every English stop word dropped from the query (the first pass's rule, withdrawn);
- `function`: only `QUESTION_FUNCTION_WORDS` below dropped (where the index keeps stop words).

Result (benchmarks/results/formats.md, raw rows in query_stopwords.jsonl): neither rule is kept.

Setups: docs/ (the demo collection) and docs/ + this repository's chunking/documents/*.py, each with
`analyzer: auto` (English here) and `standard`. Questions: the demo set (all about docs/, so a code
file in the top 2 is an unrelated hit). Modes: bm25, hybrid (RRF) and the served default
(`hybrid_auto`, no mode named).

    python -m benchmarks.bench_query_stopwords   # one JSON line per setup, rule and mode
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from chunkyard.chunking.documents.folder import load_folder
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.retrieval.lexical.analysis import ENGLISH_STOPWORDS, Analyzer, MultiAnalyzer, TermAnalyzer
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store import bm25 as bm25_lib
from chunkyard.retrieval.store.db import embedded_database_url

from benchmarks.bench_code_stopwords import mixed_folder

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = REPO / "evaluation" / "datasets" / "demo_questions.jsonl"
ORIGINAL = bm25_lib.build_analyzer
# Function words only: articles, forms of "be", "do" and "have", pronouns, demonstratives, the "wh"
# pronouns and the commonest prepositions and conjunctions; the words of the English list that carry
# meaning in a question (not, no, only, before, after, how, where, when, all, each, more) stay terms.
QUESTION_FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "doing",
        "have",
        "has",
        "had",
        "having",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "into",
        "as",
        "and",
        "or",
        "but",
        "if",
        "than",
        "so",
        "there",
    ]
)


class QueryAnalyzer:
    """An index's query analyzer less QUESTION_FUNCTION_WORDS where none of its analyzers drops stop
    words (an analyzer with a stop-word list already drops them); a query of function words only keeps
    them, so it still finds something."""

    def __init__(self, analyzer: TermAnalyzer) -> None:
        self.analyzer = analyzer
        analyzers = analyzer.analyzers if isinstance(analyzer, MultiAnalyzer) else (analyzer,)
        keeps_them = all(not a.stopwords for a in analyzers if isinstance(a, Analyzer))
        self.dropped = QUESTION_FUNCTION_WORDS if keeps_them else frozenset()

    @property
    def name(self) -> str:
        return self.analyzer.name

    def __call__(self, text: str) -> list[str]:
        return self.analyze(text)

    def analyze(self, text: str) -> list[str]:
        terms = self.analyzer.analyze(text)
        kept = [term for term in terms if term not in self.dropped]
        return kept or terms


class _EnglishDropped:
    """The first pass's rule: every English stop word dropped from the query (even every word of it)."""

    def __init__(self, analyzer: TermAnalyzer) -> None:
        self.analyzer = analyzer

    @property
    def name(self) -> str:
        return self.analyzer.name

    def __call__(self, text: str) -> list[str]:
        return self.analyze(text)

    def analyze(self, text: str) -> list[str]:
        return [term for term in self.analyzer.analyze(text) if term not in ENGLISH_STOPWORDS]


RULES = {
    "today": ORIGINAL,
    "english": lambda config: _EnglishDropped(ORIGINAL(config)),
    "function": lambda config: QueryAnalyzer(ORIGINAL(config)),
}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-query-stop-"))
    mixed = mixed_folder(work)
    store = Store(embedded_database_url(work / "pg"))
    store.migrate()
    base = load_index_configs()["recursive-256"]
    embedder = load_embedder(base.embedding_model, **base.embedder)
    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line]
    setups = (("docs", REPO / "docs"), ("mixed", mixed))
    for (name, folder), analyzer in [(s, a) for s in setups for a in ("auto", "standard")]:
        documents, _ = load_folder(folder, ["**/*.md", "**/*.py"])
        config = dataclasses.replace(base, bm25={**base.bm25, "analyzer": analyzer})
        spec = IndexSpec(f"{name}-{analyzer}", config)
        store.documents.sync(spec.collection, documents, [])
        build_index(store, spec, embedder)
        for rule, build in RULES.items():
            bm25_lib.build_analyzer = build  # the handles a new Searcher loads analyse queries by `rule`
            searcher = Searcher(store, embedder)
            for mode in ("bm25", "hybrid", None):
                hits = code_top2 = 0
                for question in questions:
                    extra = {"mode": mode} if mode else {}
                    results = searcher.search(question["question"], str(spec.name), k=5, **extra)
                    expected = {ref["document"] for ref in question["references"]}
                    hits += any(r.doc_id in expected for r in results)
                    code_top2 += any(r.doc_id.endswith(".py") for r in results[:2])
                row = {
                    "folder": name,
                    "analyzer": analyzer,
                    "rule": rule,
                    "mode": mode or "default (hybrid_auto)",
                    "questions": len(questions),
                    "hit_at_5": round(hits / len(questions), 3),
                    "code_in_top_2": code_top2,
                }
                print(json.dumps(row), flush=True)
        bm25_lib.build_analyzer = ORIGINAL


if __name__ == "__main__":
    main()
