"""Serving aliases: a stable name (`docs`) for one published index, its version at pin time and its options.

Targets are immutable rows (`alias_targets`, one per generation); the alias row points at the
current one. Setting or rolling back changes that one pointer in one transaction, so a reader
resolves the old target or the new one, never a mix (the Searcher resolves once per call and then
queries that index in its own read transaction).

Versions: publishing rewrites an index's rows in place, so pinning an index freezes its current
version into a read-only snapshot index (`collection/config@v3`, `retrieval.indexing.snapshots`;
copied once per pinned version) and the target serves that snapshot: later publishes never change
what an alias serves, and a rollback returns to the previous target's content. Each alias keeps its
current target and the `keep` targets before it along its rollback chain (CHUNKYARD_ALIAS_KEEP,
default 5); older targets are dropped, and with them the snapshots no target pins any more.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from chunkyard.chunking.environment import EnvironmentSettingError, env_int
from chunkyard.retrieval.indexing.snapshots import SnapshotError, drop_unreferenced, freeze
from chunkyard.retrieval.settings.names import (
    ALIAS_NAME,
    DEFAULT_COLLECTION,
    SNAPSHOT_MARK,
    IndexName,
    IndexNameError,
)
from chunkyard.retrieval.settings.options import SearchError, SearchOptions, default_of
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.audit import record as audit

DEFAULT_KEEP = 5


class AliasError(ValueError):
    """An alias operation is invalid; the message names the field at fault."""


@dataclass(frozen=True)
class AliasTarget:
    """What an alias serves: an index, the version it had when pinned, and the request defaults."""

    alias: str
    generation: int
    index: IndexName
    pinned_version: int
    options: SearchOptions  # the fields it pins; a request's set fields win over them
    note: str = ""
    scores: dict[str, float] = field(default_factory=dict)  # what the target scored when pinned
    set_at: datetime | None = None
    previous: int | None = None
    current_version: int | None = None  # the index's published version now (None: dropped)
    snapshot: IndexName | None = None  # the frozen copy at pinned_version (None: pinned before snapshots)

    @property
    def served(self) -> IndexName:
        """What a search through the alias queries: the snapshot, else (an old target) the live index."""
        return self.snapshot or self.index

    @property
    def drifted(self) -> bool:
        """Served content differs from the pin: an old target without a snapshot, republished since."""
        return self.snapshot is None and self.current_version != self.pinned_version

    def as_dict(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "generation": self.generation,
            "index": str(self.index),
            "pinned_version": self.pinned_version,
            "current_version": self.current_version,
            "drifted": self.drifted,
            "snapshot": str(self.snapshot) if self.snapshot else None,
            "options": stored_options(self.options),
            "note": self.note,
            "scores": dict(self.scores),
            "set_at": self.set_at.isoformat() if self.set_at else None,
            "previous": self.previous,
        }


def keep_default() -> int:
    """How many earlier targets each alias keeps for rollback (CHUNKYARD_ALIAS_KEEP, default 5)."""
    try:
        return env_int("CHUNKYARD_ALIAS_KEEP", DEFAULT_KEEP)
    except EnvironmentSettingError as exc:
        raise AliasError(str(exc)) from None


def local_actor() -> str:
    """Who an audited change made outside the service is recorded as: `local:<OS user>`."""
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return "local"


def check_alias_name(name: str) -> str:
    if not isinstance(name, str) or not ALIAS_NAME.match(name):
        raise AliasError(f"alias: must be lowercase letters, digits, '-', '_' or '.' (no '/'), got {name!r}")
    return name


def could_be_alias(name: str) -> bool:
    """Only a name without '/' can be an alias; `collection/config` is always an index."""
    return isinstance(name, str) and "/" not in name and bool(ALIAS_NAME.match(name))


def pinned_options(options: SearchOptions | Mapping[str, Any] | None) -> SearchOptions:
    """The options an alias pins: validated, the mode always (the default one when none is set)."""
    try:
        parsed = (
            options if isinstance(options, SearchOptions) else SearchOptions.of(None, dict(options or {}))
        )
    except (SearchError, TypeError) as exc:
        raise AliasError(f"options: {exc}") from exc
    if parsed.rerank is not None and not isinstance(parsed.rerank, str):
        raise AliasError("options.rerank: an alias stores a reranker by name, not an object")
    return parsed if parsed.mode is not None else parsed.with_overrides(mode=default_of("mode"))


def stored_options(options: SearchOptions) -> dict[str, Any]:
    """The JSON an alias's options are stored and shown as: the fields set (a reranker by name)."""
    return json.loads(json.dumps(options.given()))


# -- reading -----------------------------------------------------------------------------------------

_TARGET_SQL = (
    "SELECT t.alias, t.generation, t.index_name, t.index_version, t.options, t.note, t.set_at,"
    " t.previous, i.version, t.scores, s.name FROM alias_targets t LEFT JOIN indexes i ON i.name = t.index_name"
    # the snapshot's name, spelled as IndexName.snapshot spells it
    f" LEFT JOIN indexes s ON s.name = t.index_name || '{SNAPSHOT_MARK}' || t.index_version"
)


def _target(row: tuple[Any, ...]) -> AliasTarget:
    current = int(row[8]) if row[8] is not None and int(row[8]) > 0 else None
    return AliasTarget(
        alias=row[0],
        generation=int(row[1]),
        index=IndexName.parse(row[2]),
        pinned_version=int(row[3]),
        options=SearchOptions.of(None, dict(row[4] or {})),
        note=row[5],
        set_at=row[6],
        previous=row[7],
        current_version=current,
        scores=dict(row[9] or {}),
        snapshot=IndexName.parse(row[10]) if row[10] else None,
    )


def resolve(conn: psycopg.Connection, name: str) -> AliasTarget | None:
    """The alias's current target, or None when `name` is not an alias (one indexed lookup)."""
    if not could_be_alias(name):
        return None
    try:
        row = conn.execute(
            _TARGET_SQL + " JOIN aliases a ON a.name = t.alias AND a.generation = t.generation"
            " WHERE a.name = %s",
            (name,),
        ).fetchone()
    except psycopg.errors.UndefinedTable:  # a database from before migration 5 has no aliases
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            raise
        return None
    return _target(row) if row else None


def get_alias(store: Store, name: str) -> AliasTarget | None:
    with store.connection() as conn:
        return resolve(conn, check_alias_name(name))


def list_aliases(store: Store) -> list[AliasTarget]:
    with store.connection() as conn:
        rows = conn.execute(
            _TARGET_SQL
            + " JOIN aliases a ON a.name = t.alias AND a.generation = t.generation ORDER BY t.alias"
        ).fetchall()
    return [_target(row) for row in rows]


def history(store: Store, name: str) -> list[AliasTarget]:
    """The alias's kept targets, newest first (the current one among them)."""
    with store.connection() as conn:
        rows = conn.execute(
            _TARGET_SQL + " WHERE t.alias = %s ORDER BY t.generation DESC", (check_alias_name(name),)
        ).fetchall()
    return [_target(row) for row in rows]


# -- writing -----------------------------------------------------------------------------------------


def set_alias(
    store: Store,
    name: str,
    index: str,
    options: SearchOptions | Mapping[str, Any] | None = None,
    *,
    note: str = "",
    scores: Mapping[str, float] | None = None,
    keep: int | None = None,
    actor: str | None = None,
    action: str = "alias.set",
) -> AliasTarget:
    """Point `name` at `index` (published) with `options` pinned (a mapping is parsed as SearchOptions;
    a request's set options win over them), in one transaction, written to the audit log under
    `actor` (a key's name; default `local:<user>`) as `action` (`alias.set` or `alias.promote`)."""
    check_alias_name(name)
    try:
        index_name = IndexName.parse(index)
    except IndexNameError as exc:
        raise AliasError(str(exc)) from exc
    stored = stored_options(pinned_options(options))
    keep = keep_default() if keep is None else int(keep)
    if keep < 1:
        raise AliasError(f"keep: must be at least 1, got {keep}")
    with store.connection() as conn, conn.transaction():
        _lock(conn, name)
        clash = conn.execute(
            "SELECT 1 FROM indexes WHERE name = %s", (IndexName(DEFAULT_COLLECTION, name),)
        ).fetchone()
        if clash:
            raise AliasError(
                f"alias: {name!r} is already the index {DEFAULT_COLLECTION}/{name}; pick another"
            )
        try:
            snapshot = freeze(conn, index_name)  # copy-on-pin, unless this version is frozen already
        except SnapshotError as exc:
            raise AliasError(str(exc)) from None
        frozen = snapshot.snapshot_of
        assert frozen is not None
        index_name, version = frozen
        current = conn.execute("SELECT generation FROM aliases WHERE name = %s", (name,)).fetchone()
        before = resolve(conn, name)
        generation = int(
            conn.execute(
                "SELECT coalesce(max(generation), 0) + 1 FROM alias_targets WHERE alias = %s", (name,)
            ).fetchone()[0]
        )
        conn.execute(
            "INSERT INTO alias_targets"
            " (alias, generation, index_name, index_version, options, note, scores, previous)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                name,
                generation,
                index_name,
                version,
                json.dumps(stored),
                note,
                json.dumps({key: float(value) for key, value in (scores or {}).items()}),
                current[0] if current else None,
            ),
        )
        _point(conn, name, generation)
        drop_unreferenced(conn, _prune(conn, name, keep))
        after = _current(conn, name)
        audit(conn, actor or local_actor(), action, name, before and before.as_dict(), after.as_dict())
        return after


def rollback(store: Store, name: str, *, actor: str | None = None) -> AliasTarget:
    """Point `name` back at the target it had before its current one (which stays kept); audited."""
    check_alias_name(name)
    with store.connection() as conn, conn.transaction():
        _lock(conn, name)
        target = resolve(conn, name)
        if target is None:
            raise AliasError(f"alias: {name!r} does not exist")
        if target.previous is None:
            raise AliasError(f"alias: {name!r} has no earlier target to roll back to")
        kept = conn.execute(
            "SELECT 1 FROM alias_targets WHERE alias = %s AND generation = %s", (name, target.previous)
        ).fetchone()
        if kept is None:
            raise AliasError(f"alias: {name!r}'s earlier target {target.previous} was dropped (retention)")
        _point(conn, name, target.previous)
        after = _current(conn, name)
        audit(conn, actor or local_actor(), "alias.rollback", name, target.as_dict(), after.as_dict())
        return after


def drop_alias(store: Store, name: str) -> bool:
    with store.connection() as conn, conn.transaction():
        _lock(conn, check_alias_name(name))
        deleted = conn.execute("DELETE FROM aliases WHERE name = %s", (name,)).rowcount
        targets = conn.execute(
            "DELETE FROM alias_targets WHERE alias = %s RETURNING index_name, index_version", (name,)
        ).fetchall()
        drop_unreferenced(conn, _snapshots(targets))
    return bool(deleted)


def _lock(conn: psycopg.Connection, name: str) -> None:
    """Serialise writers of one alias (readers never wait: they read the committed pointer)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('chunkyard.alias:' || %s))", (name,))


def _point(conn: psycopg.Connection, name: str, generation: int) -> None:
    conn.execute(
        "INSERT INTO aliases (name, generation) VALUES (%s, %s)"
        " ON CONFLICT (name) DO UPDATE SET generation = excluded.generation, updated_at = now()",
        (name, generation),
    )


def _current(conn: psycopg.Connection, name: str) -> AliasTarget:
    target = resolve(conn, name)
    assert target is not None
    return target


def _snapshots(targets: list[tuple[str, int]]) -> list[IndexName]:
    return [IndexName.parse(index).snapshot(version) for index, version in targets]


def _prune(conn: psycopg.Connection, name: str, keep: int) -> list[IndexName]:
    """Keep the current target and the `keep` before it along the rollback chain; drop the rest.

    Returns the snapshots the dropped targets pinned (dropped by the caller once no target pins them).
    """
    chain = {
        int(g): p
        for g, p in conn.execute("SELECT generation, previous FROM alias_targets WHERE alias = %s", (name,))
    }
    current = conn.execute("SELECT generation FROM aliases WHERE name = %s", (name,)).fetchone()[0]
    kept: list[int] = []
    generation: int | None = int(current)
    while generation is not None and generation in chain and len(kept) <= keep:
        kept.append(generation)
        generation = chain[generation]
    dropped = conn.execute(
        "DELETE FROM alias_targets WHERE alias = %s AND NOT (generation = ANY(%s))"
        " RETURNING index_name, index_version",
        (name, kept),
    ).fetchall()
    return _snapshots(dropped)
