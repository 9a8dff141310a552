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
    IndexName,
    IndexNameError,
)
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import SearchOptions, default_of
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store import aliases as alias_rows
from chunkyard.retrieval.store.keys import record as audit

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


def _target(row: alias_rows.TargetRow) -> AliasTarget:
    current = row.live_version if row.live_version is not None and row.live_version > 0 else None
    return AliasTarget(
        alias=row.alias,
        generation=row.generation,
        index=IndexName.parse(row.index_name),
        pinned_version=row.index_version,
        options=SearchOptions.of(None, row.options),
        note=row.note,
        set_at=row.set_at,
        previous=row.previous,
        current_version=current,
        scores=row.scores,
        snapshot=IndexName.parse(row.snapshot_name) if row.snapshot_name else None,
    )


def resolve(conn: psycopg.Connection, name: str) -> AliasTarget | None:
    """The alias's current target, or None when `name` is not an alias (one indexed lookup)."""
    if not could_be_alias(name):
        return None
    try:
        row = alias_rows.current_target(conn, name)
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
        rows = alias_rows.current_targets(conn)
    return [_target(row) for row in rows]


def history(store: Store, name: str) -> list[AliasTarget]:
    """The alias's kept targets, newest first (the current one among them)."""
    with store.connection() as conn:
        rows = alias_rows.kept_targets(conn, check_alias_name(name))
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
        alias_rows.lock_alias(conn, name)
        if alias_rows.index_exists(conn, IndexName(DEFAULT_COLLECTION, name)):
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
        current = alias_rows.current_generation(conn, name)
        before = resolve(conn, name)
        generation = alias_rows.next_generation(conn, name)
        alias_rows.insert_target(
            conn,
            name,
            generation,
            index_name,
            version,
            options=stored,
            note=note,
            scores={key: float(value) for key, value in (scores or {}).items()},
            previous=current,
        )
        alias_rows.point(conn, name, generation)
        drop_unreferenced(conn, _prune(conn, name, keep))
        after = _current(conn, name)
        audit(conn, actor or local_actor(), action, name, before and before.as_dict(), after.as_dict())
        return after


def rollback(store: Store, name: str, *, actor: str | None = None) -> AliasTarget:
    """Point `name` back at the target it had before its current one (which stays kept); audited."""
    check_alias_name(name)
    with store.connection() as conn, conn.transaction():
        alias_rows.lock_alias(conn, name)
        target = resolve(conn, name)
        if target is None:
            raise AliasError(f"alias: {name!r} does not exist")
        if target.previous is None:
            raise AliasError(f"alias: {name!r} has no earlier target to roll back to")
        if not alias_rows.target_kept(conn, name, target.previous):
            raise AliasError(f"alias: {name!r}'s earlier target {target.previous} was dropped (retention)")
        alias_rows.point(conn, name, target.previous)
        after = _current(conn, name)
        audit(conn, actor or local_actor(), "alias.rollback", name, target.as_dict(), after.as_dict())
        return after


def drop_alias(store: Store, name: str) -> bool:
    with store.connection() as conn, conn.transaction():
        alias_rows.lock_alias(conn, check_alias_name(name))
        deleted = alias_rows.delete_alias(conn, name)
        targets = alias_rows.delete_targets(conn, name)
        drop_unreferenced(conn, _snapshots(targets))
    return bool(deleted)


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
    chain = alias_rows.rollback_chain(conn, name)
    current = alias_rows.current_generation(conn, name)
    assert current is not None  # the caller pointed it in this transaction
    kept: list[int] = []
    generation: int | None = int(current)
    while generation is not None and generation in chain and len(kept) <= keep:
        kept.append(generation)
        generation = chain[generation]
    dropped = alias_rows.delete_targets_except(conn, name, kept)
    return _snapshots(dropped)
