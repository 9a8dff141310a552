"""The audit log: one row per admin action (alias set and rollback, promotion, key create and revoke)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from chunkyard.retrieval.store.pool import Pool

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
