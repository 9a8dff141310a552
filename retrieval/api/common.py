"""What every route of the service shares: the searcher, the API key check, the limits, the error handlers."""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files

import psycopg
from chunkyard.retrieval.api.limits import RequestLimits
from chunkyard.retrieval.endpoint_settings import EndpointError
from chunkyard.retrieval.http_guards import validation_error_body
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.store import Store
from fastapi import FastAPI, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

log = logging.getLogger("chunkyard.service")

UNAVAILABLE = "the database is unavailable; retry shortly"
ENDPOINT_UNAVAILABLE = "the embedding endpoint is unavailable; retry shortly"
OUTAGE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


@dataclass
class ServiceContext:
    """One app's shared parts: its Searcher (made on first use unless given), key and limits."""

    limits: RequestLimits
    api_key: str | None = None
    given: Searcher | None = None
    _made: Searcher | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def searcher(self) -> Searcher:
        if self.given is not None:
            return self.given
        with self._lock:
            if self._made is None:
                self._made = Searcher(Store())
            return self._made

    def store(self) -> Store:
        return self.searcher().store

    def require_key_dependency(self) -> Callable[..., None]:
        """A FastAPI dependency: 401 unless the request carries this app's key (none set: open)."""
        key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The server's API key.")
        bearer = HTTPBearer(auto_error=False, description="The server's API key as a bearer token.")
        api_key = self.api_key

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

        return require_key


def add_error_handlers(app: FastAPI) -> None:
    """422 in one encodable shape; a database or embedding endpoint outage as 503 with Retry-After."""

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


def add_docs_routes(app: FastAPI) -> None:
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
