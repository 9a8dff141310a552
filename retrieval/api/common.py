"""What every route of the service shares: the searcher, the key check, the limits, the error handlers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files

import psycopg
from chunkyard.retrieval.api.auth import AuthError, Caller, KeyRing, open_caller
from chunkyard.retrieval.api.http_guards import validation_error_body
from chunkyard.retrieval.api.limits import RequestLimits
from chunkyard.retrieval.api.rate_limits import Limits, RateLimited, RateLimiter
from chunkyard.retrieval.embedders.endpoint_settings import EndpointError
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
    rate_limiter: RateLimiter = field(default_factory=RateLimiter, repr=False)
    _keys: KeyRing | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.api_key:  # keys are checked once there is a bootstrap key; without one the service is open
            self._keys = KeyRing(self.api_key, self.store, Limits.from_environment())

    def searcher(self) -> Searcher:
        if self.given is not None:
            return self.given
        with self._lock:
            if self._made is None:
                self._made = Searcher(Store())
            return self._made

    def store(self) -> Store:
        return self.searcher().store

    def holds_admin_key(self, token: str) -> bool:
        """True when the service is open (no key) or `token` is the bootstrap key or a stored admin key
        (routes that answer everyone but say more to an admin: `/readyz`)."""
        if self._keys is None:
            return True
        try:
            return self._keys.caller(token).admin
        except AuthError:
            return False

    def require_key_dependency(self) -> Callable[..., Caller]:
        """A FastAPI dependency: the request's `Caller` (401 without a valid key, 429 over its rate)."""
        key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key.")
        bearer = HTTPBearer(auto_error=False, description="An API key as a bearer token.")
        keys = self._keys
        limiter = self.rate_limiter

        def require_key(
            supplied: str | None = Security(key_header),
            credentials: HTTPAuthorizationCredentials | None = Security(bearer),
        ) -> Caller:
            if keys is None:
                return open_caller()
            given = supplied or (credentials.credentials if credentials is not None else "")
            try:
                caller = keys.caller(given)
                limiter.admit(caller.name, caller.limits)
            except AuthError as exc:
                raise refused(exc) from None
            except RateLimited as exc:
                raise too_many(exc) from None
            return caller

        return require_key


def too_many(exc: RateLimited) -> HTTPException:
    return HTTPException(status_code=429, detail=exc.detail, headers={"Retry-After": str(exc.retry_after_s)})


def refused(exc: AuthError) -> HTTPException:
    return HTTPException(status_code=exc.status, detail=exc.detail)


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
