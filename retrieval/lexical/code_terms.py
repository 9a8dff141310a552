"""Code chunks' BM25 terms without English stop words, so a question's "what is the" never scores a code file.

Code is analysed with its index's main analyzer (code chunks do not vote for it, `retrieval.lexical.languages`).
Where that analyzer keeps stop words (`standard`: the main analyzer of a folder mostly in CJK or a
language without a stop-word list) a code file's comments and names made "what", "is" and "the"
terms, and English questions ranked code first (issue 38). Prose keeps its analyzer's terms: dropping
stop words from `standard` queries instead was measured to cost hit@5 (benchmarks/results/formats.md).
"""

from __future__ import annotations

from chunkyard.retrieval.lexical.analysis import STOPWORDS

CODE_STOPWORDS = STOPWORDS["english"]  # code is written with English words


def code_terms(terms: list[str]) -> list[str]:
    """A code chunk's terms less English stop words (terms already without them pass unchanged)."""
    return [term for term in terms if term not in CODE_STOPWORDS]
