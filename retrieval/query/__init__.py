"""Query-time search: a `Searcher` composing one module per stage over a read transaction of an index.

Stages: dense and lexical candidates, fusion, context scoring, collapse, coarse fallback, rows,
MMR and rerank; `options` (`retrieval.settings.options`) says what each does for one request.
"""

from chunkyard.retrieval.query.results import IndexNotFoundError, SearchError, SearchResult
from chunkyard.retrieval.query.searcher import Searcher, default_searcher

__all__ = ["IndexNotFoundError", "SearchError", "SearchResult", "Searcher", "default_searcher"]
