"""Who is calling: the bootstrap key (CHUNKYARD_API_KEY) or a stored key, resolved to a `Caller`.

A stored key is looked up by its token's hash and remembered for at most `CACHE_S` seconds, so
a revoked or expired key is refused by every service process within a second, at the cost of one
indexed read per key per half second.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from chunkyard.retrieval.api.rate_limits import Limits
from chunkyard.retrieval.query.aliases import AliasError, get_alias
from chunkyard.retrieval.settings.config import default_collection
from chunkyard.retrieval.settings.names import IndexName, IndexNameError, IndexRef
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.api_key import BOOTSTRAP_NAME, ApiKey, token_hash, well_formed

CACHE_S = 0.5
_CACHE_MAX = 10_000  # distinct tokens remembered (wrong ones too) before the cache starts over
ANONYMOUS = "anonymous"


class AuthError(Exception):
    """A request's key is missing, malformed, unknown, revoked or expired (401), or not allowed (403)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Caller:
    """What one request may do: its key's name, scope, collections (None: all) and limits."""

    name: str
    scope: str
    collections: frozenset[str] | None
    limits: Limits
    limited: bool = True  # False: an open service (no key), nothing to count against

    @property
    def admin(self) -> bool:
        return self.scope == "admin"

    def may_read(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections

    def require_admin(self) -> None:
        if not self.admin:
            raise AuthError(403, f"key {self.name!r} has scope {self.scope!r}; this needs an admin key")


def open_caller() -> Caller:
    """The caller of a service without keys: may do everything, unlimited."""
    return Caller(ANONYMOUS, "admin", None, Limits(0, 0), limited=False)


class KeyRing:
    """Resolves a presented token to a Caller: the bootstrap key, or a stored key (cached briefly)."""

    def __init__(
        self, bootstrap: str, store: Callable[[], Store], defaults: Limits, cache_s: float = CACHE_S
    ) -> None:
        self._bootstrap = bootstrap.encode()
        self._store = store
        self._defaults = defaults
        self._cache_s = cache_s
        self._cache: dict[str, tuple[float, ApiKey | None]] = {}
        self._lock = threading.Lock()

    def caller(self, token: str) -> Caller:
        """The caller `token` stands for; AuthError (401) when it stands for none."""
        if not token:
            raise AuthError(401, "missing API key (X-API-Key or Authorization: Bearer)")
        if hmac.compare_digest(token.encode("utf-8", "surrogateescape"), self._bootstrap):
            return Caller(BOOTSTRAP_NAME, "admin", None, self._defaults)
        if not well_formed(token):
            raise AuthError(
                401, "malformed API key: expected 'cky_' and 43 characters (see `chunkyard keys`)"
            )
        key = self.stored(token)
        if key is None:
            raise AuthError(401, "unknown API key")
        if key.revoked_at is not None:
            raise AuthError(401, f"API key {key.name!r} was revoked")
        if not key.active(datetime.now(UTC)):
            raise AuthError(401, f"API key {key.name!r} expired")
        collections = None if key.scope == "admin" else frozenset(key.collections)
        return Caller(
            key.name, key.scope, collections, self._defaults.over(key.rate_per_s, key.max_concurrent)
        )

    def stored(self, token: str) -> ApiKey | None:
        """The stored key of a well-formed token, read again once its cached copy is `cache_s` old."""
        now = time.monotonic()
        digest = token_hash(token)  # the cache holds no token either
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1]
        key = self._store().keys.by_token(token)
        with self._lock:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[digest] = (now, key)
        return key


def collection_of(index: str, store: Store) -> str | None:
    """The collection a search of `index` (an alias, `collection/config` or a bare config) reads; None
    when the name is malformed (the searcher then says why, as for any caller)."""
    try:
        ref = IndexRef(index)
        if ref.alias is not None:
            target = get_alias(store, ref.alias)
            if target is not None:
                return target.index.collection
        if "/" in index:  # `collection/config` names its collection: no project file to read
            return IndexName.parse(index).collection
        return ref.index(default_collection()).collection
    except (IndexNameError, AliasError):
        return None


def check_read(caller: Caller, index: str, store: Store) -> None:
    """403 unless `caller` may read what `index` names; the same answer whether it exists or not."""
    if caller.collections is None:
        return
    collection = collection_of(index, store)
    if collection is not None and not caller.may_read(collection):
        raise AuthError(403, f"key {caller.name!r} may not read {index!r}")
