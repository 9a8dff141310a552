"""chunkyard retrieval: Postgres/pgvector store, embedder, BM25, hybrid search, rerankers, HTTP service.

Importing `retrieval` is cheap; submodules load on first use. `retrieval.search(query, ...)` runs an
in-process search with a default Searcher; `retrieval.Client` is its HTTP twin.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retrieval.options import SearchOptions
    from retrieval.query import SearchResult

_LAZY = {
    "Store": ("retrieval.store", "Store"),
    "Embedder": ("retrieval.embedder", "Embedder"),
    "load_embedder": ("retrieval.embedder", "load_embedder"),
    "Searcher": ("retrieval.query", "Searcher"),
    "SearchResult": ("retrieval.query", "SearchResult"),
    "SearchOptions": ("retrieval.options", "SearchOptions"),
    "Client": ("retrieval.client", "Client"),
    "build_index": ("retrieval.indexing", "build_index"),
}

__all__ = [*sorted(_LAZY), "search"]


def search(
    query: str, index: str = "recursive-256", options: SearchOptions | None = None, **overrides: Any
) -> list[SearchResult]:
    """In-process search with the default Searcher (same options and results as `Client.search`)."""
    from retrieval.query import default_searcher

    return default_searcher().search(query, index, options, **overrides)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attribute = _LAZY[name]
        return getattr(importlib.import_module(module_name), attribute)
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
