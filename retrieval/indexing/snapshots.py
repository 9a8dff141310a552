"""Read-only snapshots of a published index version (`collection/config@v3`), frozen when an alias pins it.

Publishing rewrites an index's partition in place, so an alias that must keep serving v3 after v4 is
published needs its own copy: an index row, chunk and postings partitions, BM25 terms and stats,
`index_documents` rows and an HNSW graph, all under the snapshot's name. The Searcher queries it like
any index. One copy per pinned (index, version), shared by every alias target that pins it; a
snapshot is dropped with the last target that references it. A config name never holds '@', so no
build can publish into a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable

from chunkyard.retrieval.indexing.hnsw import create_hnsw, vector_storage
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store import aliases as rows
from chunkyard.retrieval.store.indexes import (
    analyze,
    create_partitions,
    drop_index_in,
    has_graph,
    partition_names,
)
from chunkyard.retrieval.store.published import count_rows
from psycopg import Connection


class SnapshotError(ValueError):
    """An index cannot be snapshotted; the message names the field at fault."""


def freeze(conn: Connection, index: IndexName) -> IndexName:
    """The snapshot of `index` at its published version, copied unless it exists (a snapshot: itself).

    Runs in the caller's transaction. The index row is share-locked, so a publish of `index` waits
    until the copy commits and the copy is of exactly one version.
    """
    row = rows.share_lock_published(conn, index)
    if row is None or not row[0]:
        raise SnapshotError(f"index: {index!r} is not a published index")
    if index.snapshot_of is not None:
        return index  # pinning a snapshot itself: it is already frozen
    version, dim, storage = row[0], row[1], vector_storage(row[2])
    snapshot = index.snapshot(version)
    rows.lock_snapshot(conn, snapshot)
    if rows.index_exists(conn, snapshot):
        return snapshot
    rows.copy_index_row(conn, index, snapshot, snapshot.config)
    create_partitions(conn, snapshot)
    rows.copy_published_rows(conn, index, snapshot)
    target = partition_names(snapshot)
    if count_rows(conn, target["chunks"]) > 0 and has_graph(dim, storage):
        create_hnsw(conn, snapshot, int(dim), storage)
    for kind in ("chunks", "postings"):
        analyze(conn, target[kind])
    return snapshot


def drop_unreferenced(conn: Connection, snapshots: Iterable[str]) -> list[IndexName]:
    """Drop each of `snapshots` that no alias target pins any more (caller's transaction); the dropped."""
    dropped: list[IndexName] = []
    for name in sorted(set(snapshots)):
        snapshot = IndexName.parse(name)
        frozen = snapshot.snapshot_of
        if frozen is None:
            continue  # a live index belongs to its collection, never to an alias
        rows.lock_snapshot(conn, snapshot)
        if not rows.is_pinned(conn, *frozen) and rows.index_exists(conn, snapshot):
            drop_index_in(conn, snapshot)
            dropped.append(snapshot)
    return dropped
