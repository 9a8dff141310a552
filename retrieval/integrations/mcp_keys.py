"""The MCP server's keys over HTTP: the service's key ring, scopes, collections and per-key limits.

`KeyCheck` (ASGI middleware in front of `/mcp`) resolves each request's key the way the REST routes
do (`api.auth.KeyRing`: the bootstrap key or a stored key, revoked or expired ones refused within a
second), takes one request from the key's rate (429 with `Retry-After` over it) and hands the
`Caller` to the tools in the request's state. The tools then check what the REST routes check
(`Permit`): the scope allows searching, the index is one of the key's collections, and a search
holds one of the key's concurrent-search slots. Every call is logged under the key's name (never
its token) on `chunkyard.mcp`, allowed or refused, as the access log records each REST call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import anyio
import psycopg
from chunkyard.retrieval.api.auth import AuthError, Caller, KeyRing, check_read
from chunkyard.retrieval.api.common import UNAVAILABLE
from chunkyard.retrieval.api.http_guards import send_json
from chunkyard.retrieval.api.rate_limits import Limits, RateLimited, RateLimiter
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.api_key import SCOPES
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("chunkyard.mcp")
STATE_KEY = "chunkyard_permit"  # where KeyCheck leaves the request's Permit (scope["state"])
SEARCH_SCOPES = frozenset(SCOPES)  # the scopes whose keys may search, list and read (admin: everything)


class Refused(Exception):
    """A tool call the caller's key may not make; the message says why (never whether an index exists)."""


@dataclass(frozen=True)
class Permit:
    """What one HTTP request's key may do in the MCP tools, and the limiter its searches count against."""

    caller: Caller
    limiter: RateLimiter

    def may_read(self, collection: str) -> bool:
        return self.caller.may_read(collection)

    def check(self, tool: str, index: str, store: Store) -> None:
        """Refused unless the key's scope allows reading and `index` is one of its collections."""
        try:
            if self.caller.scope not in SEARCH_SCOPES:
                raise AuthError(
                    403, f"key {self.caller.name!r} has scope {self.caller.scope!r}; {tool} needs search"
                )
            check_read(self.caller, index, store)
        except AuthError as exc:
            log.warning("mcp %s %s by key %r: refused: %s", tool, index, self.caller.name, exc.detail)
            raise Refused(exc.detail) from None
        log.info("mcp %s %s by key %r", tool, index, self.caller.name)

    @contextlib.contextmanager
    def search_slot(self) -> Iterator[None]:
        """One of the key's concurrent searches for the block; Refused when all are busy."""
        try:
            with self.limiter.search_slot(self.caller.name, self.caller.limits):
                yield
        except RateLimited as exc:
            log.warning("mcp search by key %r: refused: %s", self.caller.name, exc.detail)
            raise Refused(f"{exc.detail}; retry after {exc.retry_after_s} s") from None


def permit_of(request: object) -> Permit | None:
    """The Permit KeyCheck gave an HTTP request (its starlette `Request`); None over stdio or an open server."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    permit = (scope.get("state") or {}).get(STATE_KEY)
    return permit if isinstance(permit, Permit) else None


def presented(headers: dict[bytes, bytes]) -> str:
    """The key sent as `X-API-Key` or `Authorization: Bearer`, '' when none."""
    given = headers.get(b"x-api-key")
    if given:
        return given.decode("latin-1")
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    return token.strip().decode("latin-1") if scheme.lower() == b"bearer" else ""


class KeyCheck:
    """ASGI middleware: every HTTP request needs a key the ring accepts (401 otherwise), within the
    key's rate (429 and `Retry-After` otherwise); the request's Permit goes into its state."""

    def __init__(self, app: ASGIApp, keys: KeyRing, limiter: RateLimiter | None = None) -> None:
        self.app = app
        self.keys = keys
        self.limiter = limiter or RateLimiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = presented(dict(scope.get("headers") or []))
        try:
            caller = await anyio.to_thread.run_sync(self.keys.caller, token)  # may read the key table
            self.limiter.admit(caller.name, caller.limits)
        except AuthError as exc:
            log.warning("mcp %s %s: refused (%d): %s", scope["method"], scope["path"], exc.status, exc.detail)
            challenge = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
            await send_json(send, exc.status, exc.detail, challenge)
            return
        except RateLimited as exc:
            log.warning("mcp %s %s: refused (429): %s", scope["method"], scope["path"], exc.detail)
            await send_json(send, 429, exc.detail, [(b"retry-after", str(exc.retry_after_s).encode())])
            return
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:  # as the service answers it
            log.error("mcp %s %s: database unavailable: %s", scope["method"], scope["path"], exc)
            await send_json(send, 503, UNAVAILABLE, [(b"retry-after", b"2")])
            return
        scope.setdefault("state", {})[STATE_KEY] = Permit(caller, self.limiter)
        await self.app(scope, receive, send)


def key_ring(api_key: str, store: Callable[[], Store]) -> KeyRing:
    """The service's key ring: `api_key` (the bootstrap key) and the stored keys, with the default limits."""
    return KeyRing(api_key, store, Limits.from_environment())
