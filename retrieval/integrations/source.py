"""Where a framework retriever's hits come from (the running service, or in process) and their metadata.

`HitSource` runs one search the way `Client.search` and `chunkyard.search` do (one `SearchOptions`,
no second list of options) and returns the hits with the options that ran; `hit_metadata` is the one
metadata every retriever attaches to a hit: index, document id, exact span, page or slide, heading
path, scores, highlights and the effective search options.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from chunkyard.retrieval.integrations.client import Client
from chunkyard.retrieval.query.fusion import RANKING_KEYS
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.query.searcher import Searcher, default_searcher
from chunkyard.retrieval.settings.default_index import named
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import SearchOptions


class HitSource:
    """One retriever's searches: through `client` (a running `chunkyard serve`, with its API key) or,
    without one, in process through `searcher` (default: `chunkyard.search`'s)."""

    def __init__(self, client: Client | None = None, searcher: Searcher | None = None) -> None:
        if client is not None and searcher is not None:
            raise SearchError("client, searcher: give one (the service or in process), not both")
        self.client = client
        self._searcher = searcher

    @classmethod
    def of(
        cls,
        url: str | None = None,
        api_key: str | None = None,
        *,
        client: Client | None = None,
        searcher: Searcher | None = None,
    ) -> HitSource:
        """The service at `url` (with `api_key`, default CHUNKYARD_API_KEY), a given `client` or
        `searcher`, or else in process."""
        if url is not None:
            if client is not None:
                raise SearchError("url, client: give one")
            client = Client(url, api_key=api_key)
        return cls(client, searcher)

    @property
    def where(self) -> str:
        return "service" if self.client is not None else "in-process"

    def search(
        self, query: str, index: str | None, options: SearchOptions
    ) -> tuple[list[SearchResult], dict[str, Any]]:
        """The hits for `query` in `index` (None: the project's default index) and the options that ran (`index`, `mode`, `k` and every option set)."""
        if self.client is not None:
            body = self.client.search_response(query, index, options)
            results = [SearchResult.from_dict(item) for item in body["results"]]
            ran = {"index": body["index"], "mode": body["mode"], "k": body["k"]}
        else:
            searcher = self._searcher or default_searcher()
            results, plan = searcher.search_with_plan(query, index, options)
            named_index = str(results[0].index) if results else str(named(index))
            ran = {"index": named_index, "mode": plan.mode, "k": plan.k}
        effective = {**{k: v for k, v in options.given().items() if not callable(v)}, **ran}
        return results, effective

    async def asearch(
        self, query: str, index: str | None, options: SearchOptions
    ) -> tuple[list[SearchResult], dict[str, Any]]:
        """`search` off the event loop (a worker thread), so an async pipeline keeps running."""
        return await asyncio.to_thread(self.search, query, index, options)


def ranking_score(hit: SearchResult, mode: str) -> float:
    """The score the hit was ranked by: the reranker's, the context-scored one, else the mode's fusion."""
    for key in ("rerank", "with_context", RANKING_KEYS.get(mode, mode)):
        if key in hit.scores:
            return float(hit.scores[key])
    return 1.0 / hit.rank


def hit_metadata(hit: SearchResult, effective: dict[str, Any]) -> dict[str, Any]:
    """What a framework document carries for a hit: where it is, why it ranked, and the options that ran."""
    meta = hit.metadata or {}
    out: dict[str, Any] = {
        "index": str(hit.index),
        "index_version": hit.index_version,
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "start": hit.start,
        "end": hit.end,
        "rank": hit.rank,
        "scores": dict(hit.scores),
        "highlights": [dataclasses.asdict(h) for h in hit.highlights],
        "snippet": hit.snippet,
        "heading_path": [str(h) for h in meta.get("heading_path") or [] if h],
        "search_options": dict(effective),
    }
    for unit in ("page", "slide"):
        first = meta.get(unit)
        if first is not None:
            out[unit] = getattr(hit, unit) or first  # the highlight's page or slide
            out[f"{unit}s"] = [first, meta.get(f"{unit}_end", first)]  # the chunk's range
    for key in ("title", "deck_title", "path", "lang"):
        if key in meta:
            out[key] = meta[key]
    if hit.stale:
        out["stale"] = hit.stale
    return out
