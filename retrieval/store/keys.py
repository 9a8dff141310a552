"""Stored API keys and the audit log of admin actions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from chunkyard.retrieval.store.api_key import (
    ApiKey,
    ApiKeyError,
    check_name,
    check_scope,
    new_token,
    token_hash,
)
from chunkyard.retrieval.store.pool import Pool
from psycopg import sql

# The audit log: one row per admin action (alias set and rollback, promotion, key create and revoke).
ACTIONS = ("alias.set", "alias.rollback", "alias.promote", "key.create", "key.revoke")


@dataclass(frozen=True)
class AuditEntry:
    """Who did what to which target, when, with the target's state before and after."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "before": self.before,
            "after": self.after,
        }


def record(
    conn: psycopg.Connection,
    actor: str,
    action: str,
    target: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    """Write one entry on `conn`, inside the caller's transaction (the action and its entry commit together)."""
    if action not in ACTIONS:
        raise ValueError(f"action: expected one of {list(ACTIONS)}, got {action!r}")
    conn.execute(
        "INSERT INTO audit_log (actor, action, target, before, after) VALUES (%s, %s, %s, %s, %s)",
        (
            actor,
            action,
            target,
            None if before is None else json.dumps(before, default=str),
            None if after is None else json.dumps(after, default=str),
        ),
    )


class AuditLog:
    """The `audit_log` table, read newest first."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def entries(
        self, *, limit: int = 100, action: str | None = None, target: str | None = None
    ) -> list[AuditEntry]:
        """The newest `limit` entries, of one action (`alias.set`, ...) or target when given."""
        if limit < 1:
            raise ValueError(f"limit: must be at least 1, got {limit}")
        if action is not None and action not in ACTIONS:
            raise ValueError(f"action: expected one of {list(ACTIONS)}, got {action!r}")
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT id, at, actor, action, target, before, after FROM audit_log"
                " WHERE (%(action)s::text IS NULL OR action = %(action)s)"
                " AND (%(target)s::text IS NULL OR target = %(target)s)"
                " ORDER BY id DESC LIMIT %(limit)s",
                {"action": action, "target": target, "limit": limit},
            ).fetchall()
        return [AuditEntry(*row) for row in rows]


# Stored API keys: create (the token returned once), look up by token hash, list and revoke.
_COLUMNS = sql.SQL(", ").join(
    sql.Identifier(column)
    for column in (
        "name",
        "scope",
        "collections",
        "created_at",
        "created_by",
        "expires_at",
        "revoked_at",
        "rate_per_s",
        "max_concurrent",
    )
)


def _select(where: str) -> sql.Composed:
    """`SELECT <the key's columns> FROM api_keys <where>` (`where` is this module's own text)."""
    return sql.SQL("SELECT {} FROM api_keys " + where).format(_COLUMNS)


def _key(row: tuple[Any, ...]) -> ApiKey:
    return ApiKey(
        name=row[0],
        scope=row[1],
        collections=tuple(row[2] or ()),
        created_at=row[3],
        created_by=row[4],
        expires_at=row[5],
        revoked_at=row[6],
        rate_per_s=row[7],
        max_concurrent=row[8],
    )


class ApiKeys:
    """The `api_keys` table. Every create and revoke is written to the audit log in its transaction."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def create(
        self,
        name: str,
        scope: str,
        collections: Sequence[str] = (),
        *,
        actor: str,
        expires_at: datetime | None = None,
        rate_per_s: float | None = None,
        max_concurrent: int | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key and its token (returned here only: the table keeps its hash)."""
        check_name(name)
        check_scope(scope)
        wanted = tuple(dict.fromkeys(collections))
        if scope == "search" and not wanted:
            raise ApiKeyError("collection: a search key needs at least one --collection")
        if rate_per_s is not None and rate_per_s < 0:
            raise ApiKeyError(f"rate: must be 0 (no limit) or more, got {rate_per_s}")
        if max_concurrent is not None and max_concurrent < 0:
            raise ApiKeyError(f"concurrency: must be 0 (no limit) or more, got {max_concurrent}")
        token = new_token()
        with self._pool.connection() as conn, conn.transaction():
            if conn.execute("SELECT 1 FROM api_keys WHERE name = %s", (name,)).fetchone():
                raise ApiKeyError(f"name: a key named {name!r} exists already (names are never reused)")
            row = conn.execute(
                sql.SQL(
                    "INSERT INTO api_keys (name, token_hash, scope, collections, created_by, expires_at,"
                    " rate_per_s, max_concurrent) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING {}"
                ).format(_COLUMNS),
                (name, token_hash(token), scope, list(wanted), actor, expires_at, rate_per_s, max_concurrent),
            ).fetchone()
            key = _key(row)
            record(conn, actor, "key.create", name, None, key.as_dict())
        return key, token

    def by_token(self, token: str) -> ApiKey | None:
        """The key a token belongs to (active or not), None when no key has it."""
        with self._pool.connection() as conn:
            row = conn.execute(_select("WHERE token_hash = %s"), (token_hash(token),)).fetchone()
        return None if row is None else _key(row)

    def get(self, name: str) -> ApiKey | None:
        with self._pool.connection() as conn:
            row = conn.execute(_select("WHERE name = %s"), (name,)).fetchone()
        return None if row is None else _key(row)

    def list(self) -> list[ApiKey]:
        """Every key, revoked and expired ones included (their status says which)."""
        with self._pool.connection() as conn:
            try:
                rows = conn.execute(_select("ORDER BY name")).fetchall()
            except psycopg.errors.UndefinedTable:
                return []
        return [_key(row) for row in rows]

    def collections_known(self) -> set[str]:
        """The collections the database knows: those with documents or registered indexes."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT collection FROM indexes UNION SELECT DISTINCT collection FROM documents"
            ).fetchall()
        return {row[0] for row in rows}

    def active_count(self) -> int:
        """How many keys are neither revoked nor expired (0 before the keys table exists)."""
        with self._pool.connection() as conn:
            try:
                row = conn.execute(
                    "SELECT count(*) FROM api_keys WHERE revoked_at IS NULL"
                    " AND (expires_at IS NULL OR expires_at > now())"
                ).fetchone()
            except psycopg.errors.UndefinedTable:
                return 0
        return int(row[0])

    def revoke(self, name: str, *, actor: str) -> ApiKey:
        """Revoke a key now; every service refuses it within a second (their key caches expire)."""
        with self._pool.connection() as conn, conn.transaction():
            row = conn.execute(_select("WHERE name = %s FOR UPDATE"), (name,)).fetchone()
            if row is None:
                raise ApiKeyError(f"name: no key named {name!r}")
            before = _key(row)
            if before.revoked_at is not None:
                raise ApiKeyError(
                    f"name: key {name!r} was revoked already, at {before.revoked_at.isoformat()}"
                )
            after = _key(
                conn.execute(
                    sql.SQL("UPDATE api_keys SET revoked_at = now() WHERE name = %s RETURNING {}").format(
                        _COLUMNS
                    ),
                    (name,),
                ).fetchone()
            )
            record(conn, actor, "key.revoke", name, before.as_dict(), after.as_dict())
        return after
