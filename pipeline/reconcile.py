"""The reconciler: where a collection's folder, stored documents and published indexes disagree, and when
a run for it is due.

The document sensor requests a run when it SEES a change, and its cursor moves on at once: a run that
dies (killed, daemon gone, Postgres stopped) leaves the change unindexed with nothing left to notice it.
So each tick also compares the three states directly: files the documents table has not caught up
with (`folder_gap`, by the same signature and content-hash rules as the documents step) and documents
each index lacks, holds stale or still serves after a deletion (`retrieval.indexing.lag`). A gap that no queued
or running run covers gets a run; one that runs keep failing to close is retried with exponential
backoff and, after `GapBackoff.max_attempts`, reported and left alone until it changes (`decide`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chunkyard.chunking.environment import env_int
from chunkyard.pipeline.documents import load_collection_documents
from chunkyard.retrieval.indexing.lag import IndexLag, index_lag
from chunkyard.retrieval.settings.config import Collection
from chunkyard.retrieval.store import Store

BACKOFF_ENV = "CHUNKYARD_RECONCILE_BACKOFF"  # seconds before the first retry of a gap (then doubling)
ATTEMPTS_ENV = "CHUNKYARD_RECONCILE_ATTEMPTS"  # runs of one gap before it is reported and left alone
DEFAULT_BACKOFF_SECONDS = 30
DEFAULT_MAX_ATTEMPTS = 5
MAX_BACKOFF_SECONDS = 3600


@dataclass(frozen=True)
class FolderGap:
    """Files whose current content the documents table does not hold yet (ids as the documents step's)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.added) + len(self.changed) + len(self.deleted)


def folder_gap(store: Store, collection: Collection, seen: Mapping[str, str] | None = None) -> FolderGap:
    """What a documents sync of `collection` would change now.

    Only files whose stat signature differs from the stored one are read (a touched file is read and
    found unchanged); files that fail to load and documents of an unreadable folder are kept by the
    sync, so they are no gap either. `seen` (id -> content hash, the sensor's scan of this tick) keeps
    only what that scan saw too: a file written after the scan is the next tick's change, not a gap.
    """
    name = collection.name
    loaded = load_collection_documents(collection, store.documents.signatures(name))
    stored = store.documents.hashes(name)
    added = sorted(d.id for d in loaded.documents if d.id not in stored)
    changed = sorted(d.id for d in loaded.documents if d.id in stored and stored[d.id] != d.sha256)
    deleted: list[str] = []
    if loaded.usable:
        present = {d.id for d in loaded.documents}.union(loaded.unchanged)
        failed = [str(f.path).rstrip("/") for f in loaded.failures]
        deleted = sorted(
            doc_id
            for doc_id in stored
            if doc_id not in present and not any(doc_id == p or doc_id.startswith(p + "/") for p in failed)
        )
    if seen is not None:
        added = [i for i in added if i in seen]
        changed = [i for i in changed if i in seen and seen[i] != stored[i]]
        deleted = [i for i in deleted if i not in seen]
    return FolderGap(added, changed, deleted)


@dataclass(frozen=True)
class Gap:
    """Everything one collection's indexes do not serve yet: unsynced files and each index's lag."""

    collection: str
    folder: FolderGap
    lags: list[IndexLag]

    def __bool__(self) -> bool:
        return bool(len(self.folder)) or any(lag.documents_behind for lag in self.lags)

    @property
    def documents(self) -> int:
        """Distinct documents involved (a document behind in several indexes counts once)."""
        ids = {*self.folder.added, *self.folder.changed, *self.folder.deleted}
        for lag in self.lags:
            ids.update(lag.added, lag.changed, lag.deleted)
        return len(ids)

    def digest(self) -> str:
        """Names exactly what is behind: the same gap has the same digest tick after tick."""
        payload = {
            "folder": [self.folder.added, self.folder.changed, self.folder.deleted],
            "indexes": {lag.index: [lag.added, lag.changed, lag.deleted] for lag in self.lags},
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def summary(self) -> str:
        parts = []
        if len(self.folder):
            parts.append(
                f"{len(self.folder)} file(s) not synced ({len(self.folder.added)} added, "
                f"{len(self.folder.changed)} changed, {len(self.folder.deleted)} deleted)"
            )
        for lag in self.lags:
            if lag.documents_behind:
                oldest = f", oldest change {lag.oldest_change:%Y-%m-%d %H:%M:%S}" if lag.oldest_change else ""
                parts.append(f"{lag.index} {lag.documents_behind} document(s) behind{oldest}")
        return f"{self.collection}: " + ("; ".join(parts) or "up to date")


def collection_gap(
    store: Store,
    collection: Collection,
    index_names: Sequence[str],
    seen: Mapping[str, str] | None = None,
) -> Gap:
    """The gap of `collection` against the indexes `index_names` (the ones the pipeline builds);
    `seen`: as `folder_gap`'s."""
    return Gap(
        collection=collection.name,
        folder=folder_gap(store, collection, seen),
        lags=[index_lag(store, name, collection.name) for name in index_names],
    )


@dataclass(frozen=True)
class GapBackoff:
    """Exponential backoff between runs of one gap, and the number of runs before giving up (per gap:
    the same file content still unindexed; Dagster's own `RetryPolicy` retries one op of one run)."""

    backoff_seconds: int = DEFAULT_BACKOFF_SECONDS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    @classmethod
    def from_environment(cls) -> GapBackoff:
        backoff = env_int(BACKOFF_ENV, DEFAULT_BACKOFF_SECONDS, minimum=0, unit="whole seconds")
        attempts = env_int(ATTEMPTS_ENV, DEFAULT_MAX_ATTEMPTS, unit="a number of runs")
        return cls(int(backoff or 0), int(attempts or DEFAULT_MAX_ATTEMPTS))

    def delay(self, ended_attempts: int) -> float:
        """Seconds to wait after the last of `ended_attempts` (>= 1) before the next run."""
        return float(min(self.backoff_seconds * 2 ** (ended_attempts - 1), MAX_BACKOFF_SECONDS))


@dataclass(frozen=True)
class Attempt:
    """One earlier run for the same gap: when it ended (None: still queued or running)."""

    ended_at: float | None
    succeeded: bool = False


@dataclass(frozen=True)
class Decision:
    """`run` (attempt number `attempt`), `wait` (until `retry_at`) or `give_up` (reported)."""

    action: str
    attempt: int
    retry_at: float | None = None
    reason: str = ""


def decide(attempts: Sequence[Attempt], now: float, policy: GapBackoff) -> Decision:
    """Whether to run for a gap that earlier runs (`attempts`, any order) did not close.

    A run that ended, failed or not, counts: a gap still open after a successful run is retried the
    same way, so no gap is run for ever.
    """
    if any(a.ended_at is None for a in attempts):
        return Decision("wait", len(attempts), reason="a run for this gap is queued or running")
    ended = len(attempts)
    if ended >= policy.max_attempts:
        failed = sum(1 for a in attempts if not a.succeeded)
        return Decision(
            "give_up",
            ended,
            reason=f"{ended} runs did not close it ({failed} failed); left until the documents change",
        )
    if ended == 0:
        return Decision("run", 1)
    retry_at = max(a.ended_at or 0.0 for a in attempts) + policy.delay(ended)
    if now < retry_at:
        return Decision(
            "wait", ended + 1, retry_at, reason=f"retry {ended + 1} due in {retry_at - now:.0f} s"
        )
    return Decision("run", ended + 1)
