"""A query's BM25 terms without stop words of any language its index reads, so no document is scored for them.

An index's documents may be analysed without stop words (`standard`: CJK and languages without a list,
and code when the main analyzer is one of those) or under several analyzers (a mixed folder: the query
is analysed under each, `MultiAnalyzer`). Then "what is the" in a question would match every chunk
holding those words, code files first (issue 38). `QueryTerms` drops from a query's terms what the
stop words of English (code's and most questions' language) and of each analyzer's language become
under any of the index's analyzers. An analyzer configured with `stopwords: false` keeps them all.
"""

from __future__ import annotations

import functools

from chunkyard.retrieval.analysis import STOPWORDS, Analyzer, MultiAnalyzer, TermAnalyzer

QUESTION_LANGUAGE = "english"  # code is written in English words, and so are most questions


class QueryTerms:
    """`analyzer` for queries, less every stop word's term (see the module)."""

    def __init__(self, analyzer: TermAnalyzer) -> None:
        self.analyzer = analyzer
        analyzers: tuple[Analyzer, ...] = (
            analyzer.analyzers if isinstance(analyzer, MultiAnalyzer) else (analyzer,)
        )
        if any(a.language and not a.stopwords for a in analyzers):  # stop words asked for: kept
            self.stop_terms: frozenset[str] = frozenset()
            return
        words: set[str] = set(STOPWORDS[QUESTION_LANGUAGE])
        for a in analyzers:
            words |= STOPWORDS.get(a.language or "", frozenset())
        self.stop_terms = frozenset(term for a in analyzers for word in words for term in a.analyze(word))

    @property
    def name(self) -> str:
        return self.analyzer.name

    def __call__(self, text: str) -> list[str]:
        return self.analyze(text)

    def analyze(self, text: str) -> list[str]:
        return [term for term in self.analyzer.analyze(text) if term not in self.stop_terms]


@functools.lru_cache(maxsize=64)
def query_terms(analyzer: TermAnalyzer) -> QueryTerms:
    """The QueryTerms of an index's query analyzer (one per analyzer object: its stop terms are built once)."""
    return QueryTerms(analyzer)
