"""The MCP server (`chunkyard mcp`): search, list indexes and aliases, read a document span, as MCP tools.

Built on the official `mcp` SDK's `MCPServer`; served over stdio (a client starts `chunkyard mcp`) or
streamable HTTP at `/mcp` (`chunkyard mcp --http`), which wants the service's API key when one is set
(CHUNKYARD_API_KEY; sent as `X-API-Key` or `Authorization: Bearer`). Tools:

- `search(query, index, k, mode)`: hits with a citation each (document, span, page or slide), the
  snippet around the best highlight, the highlights, the chunk text and its score;
- `list_indexes()`: every index with its languages and freshness (published, documents behind), and
  every alias with its target;
- `read_span(doc_id, index, start, end, widen)`: the document text of a span, to widen a hit's context.

Every search goes through one `Searcher` in this process (the project's database), with the same
options and results as `chunkyard.search`. Bad arguments are a tool error naming the argument.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

import anyio
from chunkyard.retrieval.indexing.lag import index_lag
from chunkyard.retrieval.integrations.source import hit_metadata, ranking_score
from chunkyard.retrieval.query.aliases import list_aliases
from chunkyard.retrieval.query.aliases import resolve as resolve_alias
from chunkyard.retrieval.query.highlights import locate
from chunkyard.retrieval.query.results import IndexNotFoundError, SearchResult
from chunkyard.retrieval.query.searcher import Searcher
from chunkyard.retrieval.settings.config import default_collection
from chunkyard.retrieval.settings.default_index import named
from chunkyard.retrieval.settings.names import IndexName, IndexRef
from chunkyard.retrieval.settings.options import MODES, REQUEST_MAX_K, SearchError, SearchOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.types import ASGIApp, Receive, Scope, Send

MAX_SPAN_CHARS = 20_000  # the most text one read_span call returns
INSTRUCTIONS = (
    "chunkyard searches indexed document collections. Call list_indexes to see the indexes and aliases, "
    "search to find passages (each hit has a citation: document, character span, page or slide), and "
    "read_span to read more of a document around a hit."
)


def create_server(searcher: Searcher | None = None) -> MCPServer:
    """The MCP server over `searcher` (default: one on the project's database, created on first use)."""
    server = MCPServer("chunkyard", instructions=INSTRUCTIONS)
    state: dict[str, Searcher] = {} if searcher is None else {"searcher": searcher}

    def current() -> Searcher:
        if "searcher" not in state:
            state["searcher"] = Searcher()
        return state["searcher"]

    @server.tool(structured_output=True)
    async def search(
        query: str, index: str | None = None, k: int = 5, mode: str | None = None
    ) -> dict[str, Any]:
        """Search an index or alias (default: the project's default index) for passages answering `query`.
        `k`: 1-100 hits; `mode`: dense, bm25,
        hybrid, hybrid_weighted or hybrid_auto (default: the index's). Each hit has a citation (document,
        span, page or slide), the snippet around its best-matching sentence, and the chunk's text."""
        if not 1 <= k <= REQUEST_MAX_K:
            raise ToolError(f"k: must be between 1 and {REQUEST_MAX_K}, got {k}")
        if mode is not None and mode not in MODES:
            raise ToolError(f"mode: unknown {mode!r}; expected one of {', '.join(MODES)}")
        options = SearchOptions(k=k, mode=mode)
        results, plan = await _run(lambda: current().search_with_plan(query, index, options))
        return {
            "index": str(results[0].index) if results else str(named(index)),
            "mode": plan.mode,
            "k": plan.k,
            "hits": [_hit(hit, plan.mode) for hit in results],
        }

    @server.tool(structured_output=True)
    async def list_indexes() -> dict[str, Any]:
        """Every index (collection/config) with its languages and freshness, and every serving alias."""
        return await _run(lambda: _indexes_and_aliases(current()))

    @server.tool(structured_output=True)
    async def read_span(
        doc_id: str, index: str | None = None, start: int = 0, end: int = 2000, widen: int = 0
    ) -> dict[str, Any]:
        """The text of document `doc_id` (of the collection of `index`, an index or alias) from `start` to
        `end` (character offsets, as a hit's citation gives them), `widen` more characters on each side."""
        return await _run(lambda: _read_span(current(), doc_id, str(named(index)), start, end, widen))

    return server


async def _run(work: Any) -> Any:
    """`work()` in a worker thread (database and model calls block); bad input becomes a ToolError."""
    try:
        return await anyio.to_thread.run_sync(work)
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


def _indexes_and_aliases(searcher: Searcher) -> dict[str, Any]:
    store = searcher.store
    indexes = []
    for info in store.indexes.list():
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


class RequireKey:
    """ASGI middleware: every request needs `key` as `X-API-Key` or `Authorization: Bearer` (401 otherwise)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(dict(scope.get("headers") or [])):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": "missing or wrong API key (send X-API-Key or Authorization: Bearer)"})
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})

    def _allowed(self, headers: dict[bytes, bytes]) -> bool:
        given = headers.get(b"x-api-key")
        if given is None:
            scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
            given = token.strip() if scheme.lower() == b"bearer" else None
        return given is not None and hmac.compare_digest(given, self.key)


def http_app(server: MCPServer, api_key: str | None, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable HTTP app (`/mcp`), behind `api_key` when one is given."""
    app = server.streamable_http_app(host=host)
    return RequireKey(app, api_key) if api_key else app
