"""The API key a request presents, for routes that answer everyone but say more to an admin."""

from __future__ import annotations

from starlette.requests import HTTPConnection


def presented_key(connection: HTTPConnection) -> str:
    """The key a request sends (`X-API-Key`, or `Authorization: Bearer`), '' when none."""
    supplied = connection.headers.get("x-api-key")
    if supplied:
        return supplied
    scheme, _, value = connection.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""
