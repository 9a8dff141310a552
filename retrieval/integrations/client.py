"""HTTP client for the query service, with the same `search` signature and results as in-process."""

from __future__ import annotations

import os
from typing import Any

import httpx
from chunkyard.retrieval.query.results import IndexNotFoundError, SearchError, SearchResult
from chunkyard.retrieval.settings.names import IndexRef
from chunkyard.retrieval.settings.options import SearchOptions


class ServiceError(RuntimeError):
    """The service failed (5xx) or could not be reached."""


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
    The key defaults to CHUNKYARD_API_KEY."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
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
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServiceError(f"{method} {path}: {exc}") from exc
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
            raise RateLimitedError(str(detail), float(response.headers.get("Retry-After") or 1))
        if response.status_code == 404:
            raise IndexNotFoundError(str(detail))
        if response.status_code in (400, 422):  # the searcher's own wording, as in-process
            raise SearchError(str(detail))
        if response.status_code < 500:
            raise SearchError(f"{response.status_code}: {detail}")
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
