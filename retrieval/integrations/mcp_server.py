"""The MCP server (`chunkyard mcp`): search, list indexes and aliases, read a document span, as MCP tools.

Built on the official `mcp` SDK's `MCPServer`; served over stdio (a client starts `chunkyard mcp`) or
streamable HTTP at `/mcp` (`chunkyard mcp --http`), which wants a key when CHUNKYARD_API_KEY is set: that bootstrap key or a
stored one (`chunkyard keys`), sent as `X-API-Key` or `Authorization: Bearer`, checked as the REST
routes check it (`retrieval.integrations.mcp_keys`: scope, collections, rate and concurrent searches). Tools:

- `search(query, index, k, mode, max_context_tokens, llm_tokenizer)`: hits with a citation each (document, span, page
  or slide), the snippet around the best highlight, the highlights, the chunk text and its score; with
  a token budget, the texts fit it together (`retrieval.query.budget`), each still an exact span;
- `list_indexes()`: every index with its languages and freshness (published, documents behind), and
  every alias with its target;
- `read_span(doc_id, index, start, end, widen)`: the document text of a span, to widen a hit's context.

Every search goes through one `Searcher` in this process (the project's database), with the same
options and results as `chunkyard.search`. Bad arguments are a tool error naming the argument.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
from chunkyard.retrieval.indexing.lag import index_lag
from chunkyard.retrieval.integrations.mcp_keys import KeyCheck, Permit, Refused, key_ring, permit_of
from chunkyard.retrieval.integrations.source import hit_metadata, ranking_score
from chunkyard.retrieval.query.aliases import list_aliases
from chunkyard.retrieval.query.aliases import resolve as resolve_alias
from chunkyard.retrieval.query.highlights import locate
from chunkyard.retrieval.query.results import IndexNotFoundError, SearchResult
from chunkyard.retrieval.query.searcher import Searcher
from chunkyard.retrieval.settings.config import default_collection
from chunkyard.retrieval.settings.default_index import named
from chunkyard.retrieval.settings.names import IndexName, IndexRef
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import MODES, REQUEST_MAX_K, SearchOptions
from chunkyard.retrieval.store import Store
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.types import ASGIApp

MAX_SPAN_CHARS = 20_000  # the most text one read_span call returns
INSTRUCTIONS = (
    "chunkyard searches indexed document collections. Call list_indexes to see the indexes and aliases, "
    "search to find passages (each hit has a citation: document, character span, page or slide), and "
    "read_span to read more of a document around a hit."
)


class SearcherSource:
    """The server's one Searcher: the given one, or one on the project's database made on first use."""

    def __init__(self, searcher: Searcher | None = None) -> None:
        self._searcher = searcher

    def __call__(self) -> Searcher:
        if self._searcher is None:
            self._searcher = Searcher()
        return self._searcher

    def store(self) -> Store:
        return self().store


def create_server(searcher: Searcher | SearcherSource | None = None) -> MCPServer:
    """The MCP server over `searcher` (default: one on the project's database, created on first use)."""
    server = MCPServer("chunkyard", instructions=INSTRUCTIONS)
    current = searcher if isinstance(searcher, SearcherSource) else SearcherSource(searcher)

    @server.tool(structured_output=True)
    async def search(
        query: str,
        index: str | None = None,
        k: int = 5,
        mode: str | None = None,
        max_context_tokens: int | None = None,
        llm_tokenizer: str | None = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """Search an index or alias (default: the project's default index) for passages answering `query`.
        `k`: 1-100 hits; `mode`: dense, bm25,
        hybrid, hybrid_weighted or hybrid_auto (default: the index's). `max_context_tokens`: the hits'
        texts together fit this many LLM tokens (`llm_tokenizer`: cl100k_base, the default, o200k_base,
        or a name of the project's llm_tokenizers): whole hits first, then each later one cut to its best sentences (its citation is
        the cut span). Each hit has a citation (document,
        span, page or slide), the snippet around its best-matching sentence, and the chunk's text."""
        if not 1 <= k <= REQUEST_MAX_K:
            raise ToolError(f"k: must be between 1 and {REQUEST_MAX_K}, got {k}")
        if mode is not None and mode not in MODES:
            raise ToolError(f"mode: unknown {mode!r}; expected one of {', '.join(MODES)}")
        try:
            options = SearchOptions(
                k=k, mode=mode, max_context_tokens=max_context_tokens, llm_tokenizer=llm_tokenizer
            )
        except SearchError as exc:
            raise ToolError(str(exc).strip("'\"")) from exc
        permit = _permit(ctx)

        def run() -> tuple[list[SearchResult], Any]:
            if permit is None:
                return current().search_with_plan(query, index, options)
            permit.check("search", str(named(index)), current().store)
            with permit.search_slot():
                return current().search_with_plan(query, index, options)

        results, plan = await _run(run)
        found: dict[str, Any] = {
            "index": str(results[0].index) if results else str(named(index)),
            "mode": plan.mode,
            "k": plan.k,
            "hits": [_hit(hit, plan.mode) for hit in results],
        }
        if max_context_tokens is not None:  # what the hits' texts cost, counted as the budget was
            found["context_tokens"] = int(sum(hit.scores.get("llm_tokens", 0.0) for hit in results))
        return found

    @server.tool(structured_output=True)
    async def list_indexes(ctx: Context | None = None) -> dict[str, Any]:
        """Every index (collection/config) with its languages and freshness, and every serving alias."""
        permit = _permit(ctx)
        return await _run(lambda: _indexes_and_aliases(current(), permit))

    @server.tool(structured_output=True)
    async def read_span(
        doc_id: str,
        index: str | None = None,
        start: int = 0,
        end: int = 2000,
        widen: int = 0,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """The text of document `doc_id` (of the collection of `index`, an index or alias) from `start` to
        `end` (character offsets, as a hit's citation gives them), `widen` more characters on each side."""
        permit = _permit(ctx)

        def run() -> dict[str, Any]:
            name = str(named(index))
            if permit is not None:
                permit.check("read_span", name, current().store)
            return _read_span(current(), doc_id, name, start, end, widen)

        return await _run(run)

    return server


def _permit(ctx: Context | None) -> Permit | None:
    """What the HTTP request's key may do (None over stdio, or over HTTP without keys: everything)."""
    if ctx is None:
        return None
    try:
        request = ctx.request_context.request
    except ValueError:  # called outside a request
        return None
    return permit_of(request)


async def _run(work: Any) -> Any:
    """`work()` in a worker thread (database and model calls block); bad input or a refused key becomes
    a ToolError."""
    try:
        return await anyio.to_thread.run_sync(work)
    except Refused as exc:
        raise ToolError(str(exc)) from exc
    except (SearchError, IndexNotFoundError, ValueError) as exc:
        raise ToolError(str(exc).strip("'\"")) from exc


def citation(hit: SearchResult) -> str:
    """`guide.pdf [120:410], page 2` / `deck.pptx [0:88], slide 3`: where a hit is, for a reader."""
    where = f"{hit.doc_id} [{hit.start}:{hit.end}]"
    if hit.page is not None:
        where += f", page {hit.page}"
    if hit.slide is not None:
        where += f", slide {hit.slide}"
    return where


def _hit(hit: SearchResult, mode: str) -> dict[str, Any]:
    meta = hit_metadata(hit, {})
    meta.pop("search_options", None)
    return {"citation": citation(hit), "score": ranking_score(hit, mode), **meta, "text": hit.text}


def _indexes_and_aliases(searcher: Searcher, permit: Permit | None = None) -> dict[str, Any]:
    """The indexes and aliases `permit`'s key may read (all of them without one), as REST lists them."""
    store = searcher.store
    indexes = []
    for info in store.indexes.list():
        if permit is not None and not permit.may_read(info["collection"]):
            continue
        lag = index_lag(store, info["name"], info["collection"]).as_dict()
        indexes.append(
            {
                "index": info["name"],
                "collection": info["collection"],
                "config": info["config_name"],
                "version": info["version"],
                "languages": info.get("languages") or {},
                "analyzer": info.get("analyzer"),
                "documents": info.get("document_count"),
                "chunks": info.get("chunk_count"),
                "freshness": {"published_at": info.get("published_at"), **lag},
            }
        )
    aliases = [
        {
            "alias": target.alias,
            "index": str(target.index),
            "pinned_version": target.pinned_version,
            "current_version": target.current_version,
            "set_at": target.set_at.isoformat() if target.set_at else None,
            "options": target.options.given(),
            "note": target.note,
        }
        for target in list_aliases(store)
        if permit is None or permit.may_read(target.index.collection)
    ]
    return {"indexes": indexes, "aliases": json.loads(json.dumps(aliases, default=str))}


def _read_span(
    searcher: Searcher, doc_id: str, index: str, start: int, end: int, widen: int
) -> dict[str, Any]:
    if start < 0 or end < start:
        raise SearchError(f"start, end: need 0 <= start <= end, got {start}, {end}")
    if widen < 0:
        raise SearchError(f"widen: must be 0 or more, got {widen}")
    name = _index_name(searcher, index)
    documents = searcher.store.documents.read(name.collection, [doc_id])
    if not documents:
        raise SearchError(f"doc_id: no document {doc_id!r} in collection {name.collection!r}")
    document = documents[0]
    lo, hi = max(0, start - widen), min(len(document.text), end + widen)
    if hi - lo > MAX_SPAN_CHARS:
        raise SearchError(f"end: at most {MAX_SPAN_CHARS} characters per call, asked for {hi - lo}")
    where = _location(document.metadata or {}, lo)
    return {
        "doc_id": doc_id,
        "collection": name.collection,
        "title": document.title,
        "start": lo,
        "end": hi,
        "length": len(document.text),
        **where,
        "text": document.text[lo:hi],
    }


def _location(metadata: dict[str, Any], offset: int) -> dict[str, int]:
    """The page or slide of `offset` from a document's `page_starts`/`slide_starts`."""
    out: dict[str, int] = {}
    for unit in ("page", "slide"):
        starts = metadata.get(f"{unit}_starts")
        if isinstance(starts, list) and starts:
            out.update(locate({unit: 1, f"{unit}_breaks": sorted(starts)[1:]}, offset))
    return out


def _index_name(searcher: Searcher, index: str) -> IndexName:
    """The index an index name, bare config name or alias means (the alias's target)."""
    ref = IndexRef.of(index)
    if ref.alias is not None:
        with searcher.store.connection() as conn:
            target = resolve_alias(conn, ref.alias)
        if target is not None:
            return target.index
    return ref.index(default_collection())


def http_app(
    server: MCPServer,
    api_key: str | None,
    host: str = "127.0.0.1",
    store: Callable[[], Store] | None = None,
) -> ASGIApp:
    """The streamable HTTP app (`/mcp`). With `api_key` (the bootstrap key) every request needs it or
    a stored key of `store`'s database (default: the project's), checked as the service checks it."""
    app = server.streamable_http_app(host=host)
    if not api_key:
        return app
    if store is None:
        made: list[Store] = []

        def store() -> Store:
            if not made:
                made.append(Store())
            return made[0]

    return KeyCheck(app, key_ring(api_key, store))
