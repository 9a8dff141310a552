"""HTTP client for the query service, with the same `search` signature and results as in-process."""

from __future__ import annotations

import logging
import math
import os
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from chunkyard.retrieval.query.results import IndexNotFoundError, SearchError, SearchResult
from chunkyard.retrieval.settings.names import IndexRef
from chunkyard.retrieval.settings.options import SearchOptions

log = logging.getLogger("chunkyard.client")
DEFAULT_RETRIES = 2  # retries of a 429 or 503 that says when to come back (0: none)
DEFAULT_MAX_RETRY_WAIT_S = 5.0  # the longest `Retry-After` waited for; a longer one is raised at once


class ServiceError(RuntimeError):
    """The service failed (5xx) or could not be reached."""


class ServiceUnavailableError(ServiceError):
    """The service is at capacity or its database is down (503); retry after `retry_after_s` seconds
    (None when the service did not say)."""

    def __init__(self, detail: str, retry_after_s: float | None) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class AuthenticationError(PermissionError):
    """The service wants an API key (401)."""


class AccessDeniedError(PermissionError):
    """The key may not do this: another collection, or an admin action with a search key (403)."""


class RateLimitedError(RuntimeError):
    """The key is over its rate or concurrent-search limit (429); retry after `retry_after_s` seconds."""

    def __init__(self, detail: str, retry_after_s: float) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class Client:
    """`Client().search("question", index="demo/recursive-256")`: the project's running `chunkyard serve`
    (found like the CLI finds it), or `Client("http://host:8000", api_key=...)` for any other service.
    The key defaults to CHUNKYARD_API_KEY.

    A 429 (the key's rate or concurrent searches) or a 503 (the service at capacity, its database
    down) that says when to come back (`Retry-After`) is retried up to `retries` times after the
    service's delay, when that delay is at most `max_retry_wait_s`; past either bound (or with
    `retries=0`) it is raised at once as RateLimitedError or ServiceUnavailableError, carrying the
    delay. A 503 is retried only for reads (GET, searches): a write may have been applied."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        retries: int = DEFAULT_RETRIES,
        max_retry_wait_s: float = DEFAULT_MAX_RETRY_WAIT_S,
    ) -> None:
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries: must be a whole number, 0 (no retry) or more, got {retries!r}")
        if not (isinstance(max_retry_wait_s, int | float) and 0 <= max_retry_wait_s < math.inf):
            raise ValueError(f"max_retry_wait_s: must be 0 or more seconds, got {max_retry_wait_s!r}")
        self.retries = retries
        self.max_retry_wait_s = float(max_retry_wait_s)
        if base_url is None:
            base_url = _project_service()
        api_key = api_key if api_key is not None else os.environ.get("CHUNKYARD_API_KEY")
        headers = {"X-API-Key": api_key} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                raise ServiceError(f"{method} {path}: {exc}") from exc
            wait = self._retry_wait(method, path, response, attempt)
            if wait is None:
                return self._answer(method, path, response)
            attempt += 1
            log.info(
                "%s %s: %d, retrying in %g s (retry %d of %d)",
                method,
                path,
                response.status_code,
                wait,
                attempt,
                self.retries,
            )
            time.sleep(wait)

    def _retry_wait(self, method: str, path: str, response: httpx.Response, attempt: int) -> float | None:
        """The seconds to wait before trying `response`'s request again; None: answer it as it is."""
        if attempt >= self.retries or response.status_code not in (429, 503):
            return None
        if response.status_code == 503 and not (method == "GET" or path == "/v1/search"):
            return None  # a write the outage interrupted may have been applied: the caller decides
        wait = retry_after(response)
        return wait if wait is not None and wait <= self.max_retry_wait_s else None

    def _answer(self, method: str, path: str, response: httpx.Response) -> Any:
        if response.status_code < 400:
            return response.json()
        try:
            body = response.json()
            detail = body.get("message") or body.get("detail", response.text)  # 422: `message` is one line
        except (ValueError, AttributeError):
            detail = response.text
        if response.status_code == 401:
            raise AuthenticationError(str(detail))
        if response.status_code == 403:
            raise AccessDeniedError(str(detail))
        if response.status_code == 429:
            wait = retry_after(response)
            raise RateLimitedError(str(detail), 1.0 if wait is None else wait)
        if response.status_code == 404:
            raise IndexNotFoundError(str(detail))
        if response.status_code in (400, 422):  # the searcher's own wording, as in-process
            raise SearchError(str(detail))
        if response.status_code < 500:
            raise SearchError(f"{response.status_code}: {detail}")
        if response.status_code == 503:
            raise ServiceUnavailableError(f"{method} {path}: HTTP 503: {detail}", retry_after(response))
        raise ServiceError(f"{method} {path}: HTTP {response.status_code}: {detail}")

    def search(
        self, query: str, index: str | None = None, options: SearchOptions | None = None, **overrides: Any
    ) -> list[SearchResult]:
        """Top-k chunks from the service: the same options and results as `Searcher.search`."""
        payload = self.search_response(query, index, options, **overrides)
        return [SearchResult.from_dict(item) for item in payload["results"]]

    def search_response(
        self, query: str, index: str | None = None, options: SearchOptions | None = None, **overrides: Any
    ) -> dict[str, Any]:
        """The service's response body as it is (`index`, `mode` and `k` that ran, `results`, `took_ms`).

        Only the options set are sent, so an alias's pinned ones apply to the rest."""
        sent = SearchOptions.of(options, overrides)
        body: dict[str, Any] = {"query": query, **_sent(sent)}
        if index is not None:  # none: the service's project default (`retrieval.settings.default_index`)
            body["index"] = str(IndexRef.of(index))
        return self._request("POST", "/v1/search", json=body)

    def indexes(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/indexes")

    def aliases(self) -> list[dict[str, Any]]:
        """Every serving alias and its current target (`search(..., index=<alias>)` queries it)."""
        return self._request("GET", "/v1/aliases")

    def set_alias(
        self, name: str, index: str, options: SearchOptions | dict[str, Any] | None = None, *, note: str = ""
    ) -> dict[str, Any]:
        """Point alias `name` at `index` with `options` pinned (a dict is read as SearchOptions)."""
        if not isinstance(options, SearchOptions):
            options = SearchOptions.of(None, options)
        body = {"index": index, "options": _sent(options), "note": note}
        return self._request("PUT", f"/v1/aliases/{name}", json=body)

    def rollback_alias(self, name: str) -> dict[str, Any]:
        return self._request("POST", f"/v1/aliases/{name}/rollback")

    def ready(self) -> bool:
        try:
            self._request("GET", "/readyz")
        except (ServiceError, SearchError):
            return False
        return True


def retry_after(response: httpx.Response) -> float | None:
    """A response's `Retry-After` in seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    raw = response.headers.get("Retry-After", "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _sent(options: SearchOptions) -> dict[str, Any]:
    """The options set, as the service's JSON takes them (a reranker by name)."""
    if options.rerank is not None and not isinstance(options.rerank, str):
        raise SearchError("rerank: the service takes a reranker name, not an object")
    return options.given()


def _project_service() -> str:
    """The URL of the current project's running `chunkyard serve` (its `.chunkyard/service.json`)."""
    from chunkyard.retrieval.api import service_file
    from chunkyard.retrieval.store.db import chunkyard_home

    home = chunkyard_home()
    running = service_file.running(home)
    if running is None:
        raise ServiceError(
            f"no running `chunkyard serve` for the project of {home.parent}: start one, or pass its URL "
            "(Client('http://host:8000'))"
        )
    return str(running["url"])
