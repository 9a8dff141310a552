"""HTTP query service (FastAPI): `POST /v1/search`, `GET /v1/indexes`, `/healthz`, `/readyz`, offline docs.

Caller input always gets a 4xx naming the problem (422 for fields the request model refuses, 400
for values the searcher rejects, 404 for unknown indexes, 401 without the API key, 413 for bodies
over the cap, 415 for non-JSON bodies); a database outage gets 503 with a generic reason (details
only in the log); a 500 means a bug. The API docs (`/docs`, `/redoc`) load their assets from the
installed `fastapi_offline` package, never from a CDN.

Run with `chunkyard serve` or `uvicorn retrieval.service:app` (which warms the model and the BM25
copies before `/readyz` answers 200).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from importlib.resources import files
from typing import Any, Literal

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from retrieval.alias_api import add_alias_routes
from retrieval.db import verify_server
from retrieval.endpoint_settings import EndpointError, endpoint_identity
from retrieval.http_guards import BodyLimit, check_json_values, validation_error_body
from retrieval.lag import index_lag
from retrieval.names import IndexNameError
from retrieval.options import MAX_K, SERVICE_MAX_K, OptionSpec, SearchOptions, option_specs
from retrieval.query import IndexNotFoundError, Searcher, SearchError, SearchResult
from retrieval.query.results import NOTHING_INDEXED
from retrieval.rerank import RerankerConfigError
from retrieval.selfcheck import DatabaseSelfCheckError
from retrieval.store import Store

log = logging.getLogger("chunkyard.service")

DEFAULT_MAX_K = SERVICE_MAX_K
DEFAULT_MAX_QUERY_CHARS = 4000
DEFAULT_MAX_BODY_BYTES = 64 * 1024
UNAVAILABLE = "the database is unavailable; retry shortly"
ENDPOINT_UNAVAILABLE = "the embedding endpoint is unavailable; retry shortly"
OUTAGE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
# The per-mode metric means `/v1/indexes` shows by default (`?full=true` gives the whole report).
HEADLINE_METRICS = ("hit_at_{k}", "mrr_at_{k}", "recall_at_{k}", "precision_at_{k}", "iou_at_{k}")

_WIRE_TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "bool": bool,
    "object": dict[str, Any],
    "reranker": str,
}


class _StrictRequest(BaseModel):
    """No coercion (`"5"`, `true` and `0` are not k or a bool), no unknown fields, no unencodable values."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _encodable_values(cls, data: Any) -> Any:
        check_json_values(data)
        return data


def _request_field(spec: OptionSpec, max_k: int) -> tuple[Any, Any]:
    """A pydantic field for one search option: its JSON type, default, request bounds and description."""
    wire = Literal[spec.choices] if spec.kind == "choice" else _WIRE_TYPES[spec.kind]
    bounds: dict[str, Any] = {}
    if spec.kind in ("int", "float"):
        bounds = {"ge": spec.ge, "le": max_k if spec.name == "k" else spec.request_bound}
        if spec.kind == "float":
            bounds["allow_inf_nan"] = False
    return (wire | None if spec.nullable else wire, Field(spec.default, description=spec.help, **bounds))


def request_model(max_k: int = DEFAULT_MAX_K) -> type[BaseModel]:
    """The request body: the query, the index, and every field of SearchOptions (derived, never listed)."""
    return create_model(
        "SearchRequest",
        __base__=_StrictRequest,
        # emptiness is the searcher's check, so the service and in-process say it alike
        query=(str, Field(description="The question or keywords (not blank).")),
        index=(str, Field("recursive-256", min_length=1, max_length=200, description="`collection/config`.")),
        **{spec.name: _request_field(spec, max_k) for spec in option_specs()},
    )


SearchRequest = request_model()


class SearchResponse(BaseModel):
    index: str
    mode: str
    k: int
    results: list[SearchResult]
    took_ms: float


class ErrorResponse(BaseModel):
    detail: str


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: _error("A value the searcher rejects (k over this server's limit, a blank query, ...)."),
    401: _error("Missing or wrong API key (when the server has one)."),
    413: _error("The request body is over the server's cap."),
    415: _error("The body is not JSON."),
    503: _error("The database is unavailable; retry shortly."),
}


def _allowed_rerankers() -> set[str]:
    configured = os.environ.get("CHUNKYARD_ALLOWED_RERANKERS", "")
    return {"maxsim", *(name.strip() for name in configured.split(",") if name.strip())}


def headline(report: dict[str, Any] | None) -> dict[str, float]:
    """`{mode}/{metric}` means of the headline metrics in a stored evaluation report dict."""
    if not isinstance(report, dict):
        return {}
    k = report.get("k", 5)
    names = [template.format(k=k) for template in HEADLINE_METRICS]
    out: dict[str, float] = {}
    for mode, summary in (report.get("summaries") or {}).items():
        overall = (summary or {}).get("overall") or {}
        for name in names:
            mean = (overall.get(name) or {}).get("mean")
            if isinstance(mean, int | float):
                out[f"{mode}/{name}"] = round(float(mean), 4)
    return out


def _index_summary(info: dict[str, Any]) -> dict[str, Any]:
    """An index as `/v1/indexes` lists it by default: its facts and its evaluation's headline means."""
    evaluation = info.get("latest_evaluation")
    summary = {key: value for key, value in info.items() if key not in ("config", "latest_evaluation")}
    summary["latest_evaluation"] = (
        None
        if evaluation is None
        else {
            **{key: value for key, value in evaluation.items() if key != "report"},
            "headline": headline(evaluation.get("report")),
        }
    )
    return summary


def _self_check_failed(error: DatabaseSelfCheckError) -> JSONResponse:
    """The database cannot run pgvector's operators: not an outage that passes, so say what and why."""
    return JSONResponse({"status": "failed", "detail": str(error), "hint": error.hint}, status_code=503)


def _published_state(store: Store) -> tuple[int, int]:
    """The schema version and the number of published indexes; (0, 0) before anything was indexed."""
    with store.connection() as conn:
        try:
            version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
            published = conn.execute("SELECT count(*) FROM indexes WHERE version > 0").fetchone()[0]
        except psycopg.errors.UndefinedTable:
            return 0, 0
    return int(version), int(published)


class _Readiness:
    """Ready once the model and the BM25 copies of every published index are loaded (warm), or at once."""

    def __init__(self, warm: bool | Sequence[str]) -> None:
        self.warm = warm
        self.done = threading.Event()
        self.failure = ""
        self.fatal: DatabaseSelfCheckError | None = None  # a verdict, not an outage: no more retries
        if not warm:
            self.done.set()

    def run(self, searcher: Searcher, retry_s: float = 2.0) -> None:
        """Warm until it succeeds (a database that is down now may be up later)."""
        while not self.done.is_set():
            try:
                started = time.perf_counter()
                names = self._names(searcher)
                for name, config in names:
                    try:
                        searcher.embedder(name, config).embed(["warm up"])
                    except EndpointError as exc:  # /readyz reports it; BM25 searches still serve
                        log.warning("warm: %s: embedding endpoint: %s", name, exc)
                    if searcher.bm25_backend == "memory":
                        searcher.warm(name)
                log.info("warm: %d index(es) in %.1f s", len(names), time.perf_counter() - started)
                self.done.set()
            except DatabaseSelfCheckError as exc:
                self.fatal = exc
                log.error("warming stopped: %s (%s)", exc, exc.hint)
                return
            except Exception as exc:
                self.failure = type(exc).__name__
                log.warning("warming failed (%s); retrying in %.0f s", exc, retry_s)
                time.sleep(retry_s)

    def endpoint_problems(self, searcher: Searcher) -> dict[str, str] | None:
        """Per published index served by an embedding server: '' when it answers a probe (checked at
        most every few seconds), else why not; None when no index uses one."""
        served = [
            (n, c) for n, c in self._names(searcher, every=True) if endpoint_identity(c.get("embedder") or {})
        ]
        if not served:
            return None
        return {name: searcher.embedder(name, config).unavailable() for name, config in served}

    def _names(self, searcher: Searcher, every: bool = False) -> list[tuple[str, dict[str, Any]]]:
        wanted = None if self.warm is True or every else set(self.warm)
        return [
            (info["name"], info["config"] or {})
            for info in searcher.store.indexes.list()
            if info["version"] and (wanted is None or info["name"] in wanted)
        ]


def create_app(
    searcher: Searcher | None = None,
    *,
    api_key: str | None = None,
    max_k: int = DEFAULT_MAX_K,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    warm: bool | Sequence[str] = False,
) -> FastAPI:
    """The service app. `api_key` defaults to CHUNKYARD_API_KEY (unset = open). `warm`: load the
    model and BM25 copies (of every published index, or of the names given) before `/readyz` is 200."""
    if not 1 <= max_k <= MAX_K:
        raise ValueError(f"max_k: must be between 1 and {MAX_K}, got {max_k}")
    api_key = api_key if api_key is not None else os.environ.get("CHUNKYARD_API_KEY") or None
    state: dict[str, Searcher] = {}
    readiness = _Readiness(warm)
    lock = threading.Lock()

    def get_searcher() -> Searcher:
        if searcher is not None:
            return searcher
        with lock:
            if "searcher" not in state:
                state["searcher"] = Searcher(Store())
            return state["searcher"]

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not readiness.done.is_set():
            threading.Thread(target=readiness.run, args=(get_searcher(),), daemon=True, name="warm").start()
        yield

    app = FastAPI(
        title="chunkyard",
        version="0.1.0",
        description=(
            "Search chunkyard indexes: dense (pgvector HNSW), BM25, hybrid fusion, reranking.\n\n"
            "```\ncurl -s localhost:8000/v1/search -H 'X-API-Key: $KEY' "
            '-d \'{"query": "how do I add my own documents?", "index": "demo/recursive-256", "k": 3}\'\n```\n'
            "The body is JSON (a body sent without a content type, as `curl -d` does, is read as JSON)."
        ),
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    search_request = SearchRequest if max_k == DEFAULT_MAX_K else request_model(max_k)
    _offline_docs(app)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(validation_error_body(exc.errors()), status_code=422)

    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(psycopg.InterfaceError)
    async def outage(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "%s %s: database unavailable: %s: %s", request.method, request.url.path, type(exc).__name__, exc
        )
        return JSONResponse({"detail": UNAVAILABLE}, status_code=503, headers={"Retry-After": "2"})

    @app.exception_handler(EndpointError)
    async def endpoint_outage(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s: embedding endpoint: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": ENDPOINT_UNAVAILABLE}, status_code=503, headers={"Retry-After": "2"})

    key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The server's API key.")
    bearer = HTTPBearer(auto_error=False, description="The server's API key as a bearer token.")

    def require_key(
        supplied: str | None = Security(key_header),
        credentials: HTTPAuthorizationCredentials | None = Security(bearer),
    ) -> None:
        if not api_key:
            return
        given = supplied or (credentials.credentials if credentials is not None else "")
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), api_key.encode()):
            raise HTTPException(
                status_code=401,
                detail="missing or wrong API key (X-API-Key or Authorization: Bearer)",
            )

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: _error("Warming up, or the database is unavailable.")})
    def readyz() -> JSONResponse:
        """The model and BM25 copies are loaded, the database answers and its schema is migrated.

        With an index on an embedding server, `dependencies` says whether it answers a probe; when it
        does not, the status is `degraded` but the code stays 200 (BM25 searches still work)."""
        if readiness.fatal is not None:
            return _self_check_failed(readiness.fatal)
        if not readiness.done.is_set():
            return JSONResponse(
                {"status": "warming", "detail": "loading the model and the BM25 copies"}, status_code=503
            )
        try:
            store = get_searcher().store
            version, published = _published_state(store)
            database = verify_server(store.url).describe()
        except DatabaseSelfCheckError as exc:
            return _self_check_failed(exc)
        except Exception as exc:  # not ready: the reason goes to the log, not to an anonymous caller
            log.error("readyz: %s: %s", type(exc).__name__, exc)
            return JSONResponse({"status": "unavailable", "detail": UNAVAILABLE}, status_code=503)
        body: dict[str, Any] = {
            "status": "ready",
            "schema_version": version,
            "database": database,
            "indexes": published,
        }
        if not published:
            body["detail"] = NOTHING_INDEXED
        problems = readiness.endpoint_problems(get_searcher())
        if problems is not None:  # an embedding server is a dependency of the indexes it serves
            down = {name: problem for name, problem in problems.items() if problem}
            body["dependencies"] = {"database": "ok", "embedding_endpoint": "unavailable" if down else "ok"}
            if down:  # still 200: BM25 searches work, and every replica shares the endpoint
                log.error("readyz: embedding endpoint: %s", "; ".join(f"{n}: {p}" for n, p in down.items()))
                body.update(status="degraded", detail=ENDPOINT_UNAVAILABLE)
        return JSONResponse(body)

    @app.get(
        "/v1/indexes",
        dependencies=[Depends(require_key)],
        responses={k: v for k, v in ERRORS.items() if k in (401, 503)},
    )
    def indexes(
        full: bool = Query(False, description="The whole config and evaluation report of each index."),
    ) -> list[dict[str, Any]]:
        """Every index: version, sizes and its latest evaluation's headline means (`?full=true`: all)."""
        store = get_searcher().store
        listed = store.indexes.list()
        for info in listed:  # documents behind and the oldest unindexed change (retrieval.lag)
            info["lag"] = index_lag(store, info["name"], info["collection"]).as_dict()
        return listed if full else [_index_summary(info) for info in listed]

    def search(request: BaseModel) -> SearchResponse:
        """Top-k chunks with exact spans, per-stage scores and timings."""
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
            try:
                results, plan = get_searcher().search_with_plan(request.query, request.index, options)
            except OUTAGE_ERRORS as exc:  # a connection the restart broke: the pool is refilled, once more
                log.warning("search: %s: %s; retrying once", type(exc).__name__, exc)
                results, plan = get_searcher().search_with_plan(request.query, request.index, options)
        except IndexNotFoundError as exc:
            raise HTTPException(status_code=404, detail=str(exc).strip("'\"")) from exc
        except (SearchError, RerankerConfigError, IndexNameError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return SearchResponse(
            index=results[0].index if results else request.index,
            mode=plan.mode,  # what ran: an alias's pinned mode and k, not the request's defaults
            k=plan.k,
            results=results,
            took_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    search.__annotations__["request"] = search_request  # this app's model (its k limit), not a name
    app.post(
        "/v1/search", response_model=SearchResponse, dependencies=[Depends(require_key)], responses=ERRORS
    )(search)
    add_alias_routes(
        app,
        lambda: get_searcher().store,
        require_key,
        ERRORS,
        max_k=max_k,
        rerankers=_allowed_rerankers,
    )
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app


def _offline_docs(app: FastAPI) -> None:
    """`/docs` (Swagger UI) and `/redoc` from the assets the `fastapi_offline` package ships."""
    app.mount("/static-docs", StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs")

    @app.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="chunkyard API",
            swagger_js_url="/static-docs/swagger-ui-bundle.js",
            swagger_css_url="/static-docs/swagger-ui.css",
            swagger_favicon_url="/static-docs/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title="chunkyard API",
            redoc_js_url="/static-docs/redoc.standalone.js",
            redoc_favicon_url="/static-docs/favicon.png",
            with_google_fonts=False,
        )


def serve(host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Run the service with uvicorn, warm (what `chunkyard serve` does)."""
    import uvicorn

    app_options.setdefault("warm", True)
    uvicorn.run(create_app(**app_options), host=host, port=port)


def __getattr__(name: str) -> Any:
    """`retrieval.service:app` for uvicorn: the default app, warm, created on first access."""
    if name == "app":
        global _app
        if _app is None:
            _app = create_app(warm=True)
        return _app
    raise AttributeError(f"module 'retrieval.service' has no attribute {name!r}")


_app: FastAPI | None = None
