"""HTTP client for the query service, with the same `search` signature and results as in-process."""

from __future__ import annotations

from typing import Any

import httpx

from retrieval.options import SearchOptions
from retrieval.query.results import IndexNotFoundError, SearchError, SearchResult


class ServiceError(RuntimeError):
    """The service failed (5xx) or could not be reached."""


class AuthenticationError(PermissionError):
    """The service wants an API key (401)."""


class Client:
    """`Client("http://127.0.0.1:8000", api_key=...).search("question", index="demo/recursive-256")`."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
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
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        if response.status_code == 401:
            raise AuthenticationError(str(detail))
        if response.status_code == 404:
            raise IndexNotFoundError(str(detail))
        if response.status_code < 500:
            raise SearchError(f"{response.status_code}: {detail}")
        raise ServiceError(f"{method} {path}: HTTP {response.status_code}: {detail}")

    def search(
        self, query: str, index: str = "recursive-256", options: SearchOptions | None = None, **overrides: Any
    ) -> list[SearchResult]:
        """Top-k chunks from the service: the same options and results as `Searcher.search`."""
        request = SearchOptions.of(options, overrides)
        if request.rerank is not None and not isinstance(request.rerank, str):
            raise SearchError("rerank: the service takes a reranker name, not an object")
        body: dict[str, Any] = {"query": query, "index": index, **request.given()}
        payload = self._request("POST", "/v1/search", json=body)
        return [SearchResult.from_dict(item) for item in payload["results"]]

    def indexes(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/indexes")

    def aliases(self) -> list[dict[str, Any]]:
        """Every serving alias and its current target (`search(..., index=<alias>)` queries it)."""
        return self._request("GET", "/v1/aliases")

    def set_alias(
        self, name: str, index: str, options: dict[str, Any] | None = None, *, note: str = ""
    ) -> dict[str, Any]:
        """Point alias `name` at `index`; `options` (search options) become its request defaults."""
        body = {"index": index, "options": options or {}, "note": note}
        return self._request("PUT", f"/v1/aliases/{name}", json=body)

    def rollback_alias(self, name: str) -> dict[str, Any]:
        return self._request("POST", f"/v1/aliases/{name}/rollback")

    def ready(self) -> bool:
        try:
            self._request("GET", "/readyz")
        except (ServiceError, SearchError):
            return False
        return True
