"""Whether a request carries the service's API key, for routes that answer everyone but say more to holders."""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection


def presented_key(connection: HTTPConnection) -> str:
    """The key a request sends (`X-API-Key`, or `Authorization: Bearer`), '' when none."""
    supplied = connection.headers.get("x-api-key")
    if supplied:
        return supplied
    scheme, _, value = connection.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def holds_key(connection: HTTPConnection, api_key: str | None) -> bool:
    """True when the service has no key (it is open, on loopback) or the request carries it."""
    if not api_key:
        return True
    given = presented_key(connection).encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, api_key.encode())
