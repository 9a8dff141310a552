"""chunkyard's Python API: `search` in process, `Client` over HTTP, and the values they take and return.

Importing `chunkyard` is cheap: each name below loads its module on first use, so the CLI and
Dagster's code location start without the embedding model or the query stages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import Embedder, load_embedder
    from chunkyard.retrieval.integrations.client import Client
    from chunkyard.retrieval.query import Searcher, SearchResult
    from chunkyard.retrieval.settings.names import IndexRef
    from chunkyard.retrieval.settings.options import SearchOptions, SearchRequest
    from chunkyard.retrieval.store import Store

__all__ = [
    "Client",
    "Embedder",
    "IndexRef",
    "SearchOptions",
    "SearchRequest",
    "SearchResult",
    "Searcher",
    "Store",
    "build_index",
    "load_embedder",
    "search",
]


def search(
    query: str, index: str | None = None, options: SearchOptions | None = None, **overrides: Any
) -> list[SearchResult]:
    """In-process search with the default Searcher (same options and results as `Client.search`); with
    no `index`, the project's default index (`chunkyard.retrieval.settings.default_index`)."""
    from chunkyard.retrieval.query import default_searcher

    return default_searcher().search(query, index, options, **overrides)  # None: the default index


def __getattr__(name: str) -> Any:
    # Each public name is imported by a statement of its own (no module named by a string).
    if name == "Client":
        from chunkyard.retrieval.integrations.client import Client

        return Client
    if name in ("Embedder", "load_embedder"):
        from chunkyard.retrieval.embedders import embedder

        return getattr(embedder, name)
    if name == "build_index":
        from chunkyard.pipeline.graph import build_index

        return build_index
    if name == "IndexRef":
        from chunkyard.retrieval.settings.names import IndexRef

        return IndexRef
    if name in ("SearchOptions", "SearchRequest"):
        from chunkyard.retrieval.settings import options

        return getattr(options, name)
    if name in ("Searcher", "SearchResult"):
        from chunkyard.retrieval import query

        return getattr(query, name)
    if name == "Store":
        from chunkyard.retrieval.store import Store

        return Store
    raise AttributeError(f"module 'chunkyard' has no attribute {name!r}")
