"""The UI proxy's check of stored API keys: asked of the query service (`GET /v1/keys/self`), cached briefly.

The proxy holds no database credentials, so a key made with `chunkyard keys create` is checked by the
query service it names (CHUNKYARD_API_URL): only an active admin key opens the Dagster UI. Answers
are remembered for `CACHE_S` seconds by the token's hash, so a revoked key is refused within a second.
"""

from __future__ import annotations

import time

import httpx
from chunkyard.retrieval.store.api_key import token_hash, well_formed

API_URL_ENV = "CHUNKYARD_API_URL"
CACHE_S = 0.5
_CACHE_MAX = 10_000


class StoredKeys:
    """Whether a token is an active admin key, as the query service at `api_url` says."""

    def __init__(self, api_url: str, cache_s: float = CACHE_S) -> None:
        self._client = httpx.AsyncClient(base_url=api_url.rstrip("/"), timeout=httpx.Timeout(10.0))
        self._cache: dict[str, tuple[float, bool]] = {}
        self._cache_s = cache_s

    async def admin(self, token: str | None) -> bool:
        if not token or not well_formed(token):
            return False
        digest = token_hash(token)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1]
        try:
            response = await self._client.get("/v1/keys/self", headers={"X-API-Key": token})
        except httpx.HTTPError:
            return False  # the query service is unreachable: only the bootstrap key opens the UI
        allowed = response.status_code == 200 and response.json().get("scope") == "admin"
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[digest] = (now, allowed)
        return allowed

    async def aclose(self) -> None:
        await self._client.aclose()
