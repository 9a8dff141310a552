"""chunkyard retrieval: Postgres/pgvector store, embedder, BM25, hybrid search, rerankers, HTTP service.

Importing `retrieval` is cheap; submodules load on first use. `retrieval.search(query, ...)` runs an
in-process search (the `retrieval.search` module is callable), `retrieval.Client` is the HTTP twin.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Store": ("retrieval.store", "Store"),
    "Embedder": ("retrieval.embedder", "Embedder"),
    "Searcher": ("retrieval.search", "Searcher"),
    "SearchResult": ("retrieval.search", "SearchResult"),
    "Client": ("retrieval.client", "Client"),
    "build_index": ("retrieval.indexing", "build_index"),
}

__all__ = [*sorted(_LAZY), "search"]


def __getattr__(name: str) -> Any:
    if name == "search":
        return importlib.import_module("retrieval.search")  # a callable module: retrieval.search(...)
    if name in _LAZY:
        module_name, attribute = _LAZY[name]
        return getattr(importlib.import_module(module_name), attribute)
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
