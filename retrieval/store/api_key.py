"""API keys: the token format, its hash, the scopes, expiry parsing and the `ApiKey` value."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

TOKEN_PREFIX = "cky_"
# `cky_` and 43 characters of URL-safe base64 (32 random bytes): a new token is always this shape.
TOKEN_SHAPE = re.compile(r"^cky_[A-Za-z0-9_-]{43}$")
KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
SCOPES = ("search", "admin")
BOOTSTRAP_NAME = "bootstrap"  # the name CHUNKYARD_API_KEY acts under (in the audit log)
_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class ApiKeyError(ValueError):
    """A key operation or value is invalid; the message names the field at fault."""


def new_token() -> str:
    """A fresh random token (shown once, stored only as its hash)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The stored form of a token: its SHA-256 (a 256-bit random token needs no slow hash)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def well_formed(token: str) -> bool:
    return bool(TOKEN_SHAPE.match(token))


def check_name(name: str) -> str:
    if not isinstance(name, str) or not KEY_NAME.match(name):
        raise ApiKeyError(f"name: must be lowercase letters, digits, '-', '_' or '.' (1-64), got {name!r}")
    if name == BOOTSTRAP_NAME:
        raise ApiKeyError(f"name: {BOOTSTRAP_NAME!r} is CHUNKYARD_API_KEY's name; pick another")
    return name


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ApiKeyError(f"scope: expected one of {list(SCOPES)}, got {scope!r}")
    return scope


def parse_expiry(text: str | None, now: datetime | None = None) -> datetime | None:
    """`30d`, `12h`, `90m`, `2w` from now, or an ISO date or time (UTC when it names no zone)."""
    if text is None or not text.strip():
        return None
    now = now or datetime.now(UTC)
    raw = text.strip()
    match = _DURATION.match(raw)
    if match:
        amount = int(match.group(1))
        if amount < 1:
            raise ApiKeyError(f"expires: must be in the future, got {raw!r}")
        try:
            return now + timedelta(**{_UNITS[match.group(2)]: amount})
        except OverflowError:
            raise ApiKeyError(f"expires: {raw!r} is too far in the future") from None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ApiKeyError(
            f"expires: expected a duration (30d, 12h, 90m, 2w) or an ISO date/time, got {raw!r}"
        ) from None
    when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    if when <= now:
        raise ApiKeyError(f"expires: {raw!r} is in the past")
    return when


@dataclass(frozen=True)
class ApiKey:
    """A stored key: what it may do (scope, collections), its limits and its lifetime; never its token."""

    name: str
    scope: str
    collections: tuple[str, ...]
    created_at: datetime
    created_by: str = ""
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    rate_per_s: float | None = None  # None: the service's default; 0: no limit
    max_concurrent: int | None = None  # None: the service's default; 0: no limit

    def active(self, now: datetime | None = None) -> bool:
        now = now or datetime.now(UTC)
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def status(self, now: datetime | None = None) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.active(now) else "expired"

    def as_dict(self) -> dict[str, Any]:
        def iso(when: datetime | None) -> str | None:
            return when.isoformat() if when else None

        return {
            "name": self.name,
            "scope": self.scope,
            "collections": list(self.collections),
            "status": self.status(),
            "created_at": iso(self.created_at),
            "created_by": self.created_by,
            "expires_at": iso(self.expires_at),
            "revoked_at": iso(self.revoked_at),
            "rate_per_s": self.rate_per_s,
            "max_concurrent": self.max_concurrent,
        }
