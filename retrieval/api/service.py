"""HTTP query service (FastAPI): `POST /v1/search`, `GET /v1/indexes`, `/healthz`, `/readyz`, offline docs.

Caller input always gets a 4xx naming the problem (422 for fields the request model refuses, 400
for values the searcher rejects, 404 for unknown indexes, 401 without the API key, 413 for bodies
over the cap, 415 for non-JSON bodies); a database outage gets 503 with a generic reason (details
only in the log); a 500 means a bug. The API docs (`/docs`, `/redoc`) load their assets from the
installed `fastapi_offline` package, never from a CDN.

Run with `chunkyard serve` or `uvicorn retrieval.api.service:app` (which warms the model and the BM25
copies before `/readyz` answers 200).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

from chunkyard.retrieval.api.admission import Admission, AdmissionLimits
from chunkyard.retrieval.api.alias_routes import add_alias_routes
from chunkyard.retrieval.api.common import (
    ENDPOINT_UNAVAILABLE,
    UNAVAILABLE,
    ServiceContext,
    add_docs_routes,
    add_error_handlers,
)
from chunkyard.retrieval.api.http_guards import BodyLimit
from chunkyard.retrieval.api.key_routes import add_key_routes
from chunkyard.retrieval.api.limits import RequestLimits
from chunkyard.retrieval.api.metrics import ServiceMetrics, add_metrics_route
from chunkyard.retrieval.api.models import DEFAULT_MAX_K, SearchBody, SearchResponse, request_model
from chunkyard.retrieval.api.search_routes import add_search_routes
from chunkyard.retrieval.api.status_routes import Readiness, add_status_routes, headline
from chunkyard.retrieval.observability.telemetry import instrument_app
from chunkyard.retrieval.query import Searcher
from fastapi import FastAPI

DEFAULT_MAX_QUERY_CHARS = 4000
DEFAULT_MAX_BODY_BYTES = 64 * 1024
__all__ = [
    "ENDPOINT_UNAVAILABLE",
    "UNAVAILABLE",
    "SearchBody",
    "SearchResponse",
    "create_app",
    "headline",
    "request_model",
    "serve",
]


def create_app(
    searcher: Searcher | None = None,
    *,
    api_key: str | None = None,
    max_k: int = DEFAULT_MAX_K,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    warm: bool | Sequence[str] = False,
    admission: AdmissionLimits | None = None,
) -> FastAPI:
    """The service app. `api_key`, the bootstrap admin key, defaults to CHUNKYARD_API_KEY; with one,
    every protected route takes it or a stored key (`chunkyard keys`); without one the service is open.
    `warm`: load the model and BM25 copies (of every published index, or of the names given) before
    `/readyz` is 200. `admission`: the stated search latency and concurrent searches (default: from
    the environment)."""
    ctx = ServiceContext(
        limits=RequestLimits(max_k=max_k, max_query_chars=max_query_chars),
        api_key=api_key if api_key is not None else os.environ.get("CHUNKYARD_API_KEY") or None,
        given=searcher,
    )
    readiness = Readiness(warm)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not readiness.done.is_set():
            threading.Thread(target=readiness.run, args=(ctx.searcher(),), daemon=True, name="warm").start()
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
    add_docs_routes(app)
    add_error_handlers(app)
    require_key = ctx.require_key_dependency()
    add_status_routes(app, ctx, readiness, require_key)
    body_model = SearchBody if max_k == DEFAULT_MAX_K else request_model(max_k)
    metrics = ServiceMetrics(ctx.store)
    add_search_routes(app, ctx, body_model, require_key, metrics)
    add_alias_routes(app, ctx, require_key)
    add_key_routes(app, ctx, require_key)  # keys and the audit log (admin keys)
    add_metrics_route(app, metrics, require_key)  # /metrics and the middleware counting requests
    # inside BodyLimit: a search holds a slot only once its body is read
    app.add_middleware(Admission, limits=admission or AdmissionLimits.from_env())
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    instrument_app(app)  # spans per request when OTEL_* asks for traces
    app.state.rate_limiter = ctx.rate_limiter  # this process's per-key buckets and search slots
    return app


def serve(host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Run the service with uvicorn, warm, with the server limits and redacted log of `chunkyard serve`."""
    from chunkyard.retrieval.api.server_limits import serve as serve_app

    app_options.setdefault("warm", True)
    serve_app(create_app(**app_options), host, port, secrets=[app_options.get("api_key") or ""])


def __getattr__(name: str) -> Any:
    """`retrieval.api.service:app` for uvicorn: the default app, warm, created on first access."""
    if name == "app":
        global _app
        if _app is None:
            _app = create_app(warm=True)
        return _app
    raise AttributeError(f"module 'chunkyard.retrieval.api.service' has no attribute {name!r}")


_app: FastAPI | None = None
