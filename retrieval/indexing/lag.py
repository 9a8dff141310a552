"""How far each published index is behind its collection's stored documents (what it still serves stale).

The `documents` table holds what the last documents sync read; `index_documents` holds the sha256 of
every document an index was built from. They differ after a change whose run died between the two
(or while a run is still under way): documents added or changed since the index was published, and
documents the index still serves that are no longer stored. The reconciler (`pipeline.reconcile`)
re-runs what this finds; `/v1/indexes`, `chunkyard lag` and the publish metadata show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chunkyard.retrieval.store import Store, documents, indexes


@dataclass(frozen=True)
class IndexLag:
    """One index against its collection's documents; `oldest_change` is the earliest `updated_at`
    of a stored document the index lacks or has an older version of (a deletion leaves no time)."""

    index: str
    collection: str
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    oldest_change: datetime | None = None

    @property
    def documents_behind(self) -> int:
        return len(self.added) + len(self.changed) + len(self.deleted)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `/v1/indexes` and the asset metadata show."""
        return {
            "documents_behind": self.documents_behind,
            "documents_added": len(self.added),
            "documents_changed": len(self.changed),
            "documents_deleted": len(self.deleted),
            "oldest_unindexed_change": self.oldest_change.isoformat() if self.oldest_change else None,
        }


def index_lag(store: Store, index_name: str, collection: str) -> IndexLag:
    """What index `index_name` (of `collection`) lacks, holds stale, or still serves after a deletion."""
    with store.connection() as conn:
        rows = documents.unindexed_changes(conn, index_name, collection)
        deleted = documents.deleted_since_indexed(conn, index_name, collection)
    return IndexLag(
        index=index_name,
        collection=collection,
        added=[doc_id for doc_id, missing, _ in rows if missing],
        changed=[doc_id for doc_id, missing, _ in rows if not missing],
        deleted=deleted,
        oldest_change=min((updated for _, _, updated in rows), default=None),
    )


def index_lags(store: Store, collection: str | None = None) -> list[IndexLag]:
    """`index_lag` of every registered index (of `collection` only, when given), by index name."""
    with store.connection() as conn:
        registered = indexes.registered(conn, collection)
    return [index_lag(store, name, owner) for name, owner in registered]
