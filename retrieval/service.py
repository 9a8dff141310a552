"""HTTP query service (FastAPI): `POST /v1/search`, `GET /v1/indexes`, `/healthz`, `/readyz`.

Bad input always gets a 4xx with a message naming the problem (422 for malformed JSON fields,
400 for values the searcher rejects, 404 for unknown indexes, 401 without the API key, 413 for
oversized bodies); a 500 means a bug or an outage, never the caller's input.

Run with `chunkyard serve` or `uvicorn retrieval.service:create_app --factory`.
"""

from __future__ import annotations

import hmac
import os
import time
from typing import Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, create_model

from retrieval.options import SERVICE_MAX_K, OptionSpec, SearchOptions, option_specs
from retrieval.query import IndexNotFoundError, Searcher, SearchError
from retrieval.rerank import RerankerConfigError
from retrieval.store import Store

DEFAULT_MAX_K = SERVICE_MAX_K
DEFAULT_MAX_QUERY_CHARS = 4000
DEFAULT_MAX_BODY_BYTES = 64 * 1024

_WIRE_TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "bool": bool,
    "object": dict[str, Any],
    "reranker": str,
}


def _request_field(spec: OptionSpec) -> tuple[Any, Any]:
    """A pydantic field for one search option: its JSON type, default, bounds and description."""
    wire = Literal[spec.choices] if spec.kind == "choice" else _WIRE_TYPES[spec.kind]
    bounds = {"ge": spec.ge, "le": spec.le} if spec.kind in ("int", "float") else {}
    return (wire | None if spec.nullable else wire, Field(spec.default, description=spec.help, **bounds))


# The request body: the query, the index, and every field of SearchOptions (derived, never listed here).
SearchRequest = create_model(
    "SearchRequest",
    __config__=ConfigDict(extra="forbid"),
    query=(str, Field(min_length=1, description="The question or keywords.")),
    index=(str, Field("recursive-256", min_length=1, max_length=200, description="`collection/config`.")),
    **{spec.name: _request_field(spec) for spec in option_specs()},
)


class SearchResultModel(BaseModel):
    chunk_id: str
    doc_id: str
    start: int
    end: int
    text: str
    metadata: dict[str, Any]
    scores: dict[str, float]
    rank: int
    parent: dict[str, Any] | None = None
    timings: dict[str, float] = {}
    index: str = ""
    index_version: int = 0


class SearchResponse(BaseModel):
    index: str
    mode: str
    k: int
    results: list[SearchResultModel]
    took_ms: float


def _allowed_rerankers() -> set[str]:
    configured = os.environ.get("CHUNKYARD_ALLOWED_RERANKERS", "")
    return {"maxsim", *(name.strip() for name in configured.split(",") if name.strip())}


def create_app(
    searcher: Searcher | None = None,
    *,
    api_key: str | None = None,
    max_k: int = DEFAULT_MAX_K,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The service app. `api_key` defaults to CHUNKYARD_API_KEY (unset = open)."""
    api_key = api_key if api_key is not None else os.environ.get("CHUNKYARD_API_KEY") or None
    state: dict[str, Searcher] = {}

    def get_searcher() -> Searcher:
        if searcher is not None:
            return searcher
        if "searcher" not in state:
            state["searcher"] = Searcher(Store())
        return state["searcher"]

    app = FastAPI(
        title="chunkyard",
        version="0.1.0",
        description="Search chunkyard indexes: dense (pgvector HNSW), BM25, hybrid fusion, reranking.",
    )

    @app.middleware("http")
    async def limit_body_size(request: Request, call_next):  # type: ignore[no-untyped-def]
        length = request.headers.get("content-length")
        if length is not None:
            try:
                too_big = int(length) > max_body_bytes
            except ValueError:
                return JSONResponse({"detail": "content-length: not an integer"}, status_code=400)
            if too_big:
                return JSONResponse({"detail": f"request body over {max_body_bytes} bytes"}, status_code=413)
        elif request.method in ("POST", "PUT", "PATCH"):
            body = await request.body()
            if len(body) > max_body_bytes:
                return JSONResponse({"detail": f"request body over {max_body_bytes} bytes"}, status_code=413)
        return await call_next(request)

    def require_key(request: Request) -> None:
        if not api_key:
            return
        supplied = request.headers.get("x-api-key") or ""
        auth = request.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            supplied = supplied or auth[7:].strip()
        if not hmac.compare_digest(supplied.encode(), api_key.encode()):
            raise HTTPException(
                status_code=401,
                detail="missing or wrong API key (X-API-Key or Authorization: Bearer)",
            )

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        """The database answers and its schema is migrated."""
        try:
            version = get_searcher().store.schema_version()
        except Exception as exc:  # not ready: say why, with 503
            return JSONResponse(
                {"status": "unavailable", "detail": f"{type(exc).__name__}: {exc}"},
                status_code=503,
            )
        return JSONResponse({"status": "ready", "schema_version": version})

    @app.get("/v1/indexes", dependencies=[Depends(require_key)])
    def indexes() -> list[dict[str, Any]]:
        """Every index: config, version, sizes and latest evaluation."""
        return get_searcher().store.list_indexes()

    @app.post("/v1/search", response_model=SearchResponse, dependencies=[Depends(require_key)])
    def search(request: SearchRequest) -> SearchResponse:  # type: ignore[valid-type]
        """Top-k chunks with exact spans, per-stage scores and timings."""
        if request.k > max_k:
            raise HTTPException(status_code=400, detail=f"k: at most {max_k} on this server")
        if len(request.query) > max_query_chars:
            raise HTTPException(status_code=400, detail=f"query: at most {max_query_chars} characters")
        if request.rerank is not None and request.rerank not in _allowed_rerankers():
            raise HTTPException(
                status_code=400,
                detail=f"rerank: {request.rerank!r} is not enabled here; allowed: "
                f"{sorted(_allowed_rerankers())}",
            )
        started = time.perf_counter()
        try:
            options = SearchOptions(**request.model_dump(exclude={"query", "index"}))
            results = get_searcher().search(request.query, request.index, options)
        except IndexNotFoundError as exc:
            raise HTTPException(status_code=404, detail=str(exc).strip("'\"")) from exc
        except (SearchError, RerankerConfigError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return SearchResponse(
            index=results[0].index if results else request.index,
            mode=request.mode,
            k=request.k,
            results=[SearchResultModel(**r.as_dict()) for r in results],
            took_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    return app


def serve(host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Run the service with uvicorn (what `chunkyard serve` calls)."""
    import uvicorn

    uvicorn.run(create_app(**app_options), host=host, port=port)


def __getattr__(name: str) -> Any:
    """`retrieval.service:app` for uvicorn: the default app, created on first access."""
    if name == "app":
        global _app
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(f"module 'retrieval.service' has no attribute {name!r}")


_app: FastAPI | None = None
