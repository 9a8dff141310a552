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

from chunkyard.retrieval.indexing.hnsw import create_hnsw, has_graph, vector_storage
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store.partitions import create_partitions, drop_index_in, partition_names
from psycopg import Connection, sql

_CHUNK_COLUMNS = (
    "chunk_id",
    "doc_id",
    "start",
    "end",
    "text",
    "embed_text",
    "token_count",
    "content_hash",
    "metadata",
    "parent_id",
    "bm25_length",
    "embedding",
)
_POSTING_COLUMNS = ("term", "chunk_id", "tf", "doc_len")
# per-index rows outside the partitions: (table, columns after index_name)
_ROW_TABLES = (
    ("bm25_terms", ("term", "df")),
    ("bm25_stats", ("n_docs", "total_length", "vocab_size", "idf_sum")),
    ("index_documents", ("doc_id", "sha256")),
)


class SnapshotError(ValueError):
    """An index cannot be snapshotted; the message names the field at fault."""


def freeze(conn: Connection, index: IndexName) -> IndexName:
    """The snapshot of `index` at its published version, copied unless it exists (a snapshot: itself).

    Runs in the caller's transaction. The index row is share-locked, so a publish of `index` waits
    until the copy commits and the copy is of exactly one version.
    """
    row = conn.execute(
        "SELECT version, dim, config FROM indexes WHERE name = %s FOR SHARE", (index,)
    ).fetchone()
    if row is None or not row[0]:
        raise SnapshotError(f"index: {index!r} is not a published index")
    if index.snapshot_of is not None:
        return index  # pinning a snapshot itself: it is already frozen
    version, dim, storage = int(row[0]), row[1], vector_storage(row[2])
    snapshot = index.snapshot(version)
    _lock(conn, snapshot)
    if conn.execute("SELECT 1 FROM indexes WHERE name = %s", (snapshot,)).fetchone():
        return snapshot
    conn.execute(
        "INSERT INTO indexes (name, collection, config_name, config, config_hash, partition, model_id, dim,"
        " version, published_at) SELECT %s, collection, %s, config, config_hash, %s, model_id, dim, version,"
        " published_at FROM indexes WHERE name = %s",
        (snapshot, snapshot.config, partition_names(snapshot)["chunks"], index),
    )
    create_partitions(conn, snapshot)
    source, target = partition_names(index), partition_names(snapshot)
    for kind, columns in (("chunks", _CHUNK_COLUMNS), ("postings", _POSTING_COLUMNS)):
        _copy(conn, sql.Identifier(source[kind]), sql.Identifier(target[kind]), columns, index, snapshot)
    for table, columns in _ROW_TABLES:
        _copy(conn, sql.Identifier(table), sql.Identifier(table), columns, index, snapshot)
    chunks = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(target["chunks"])))
    if int(chunks.fetchone()[0]) > 0 and has_graph(dim, storage):
        create_hnsw(conn, snapshot, int(dim), storage)
    for kind in ("chunks", "postings"):
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(target[kind])))
    return snapshot


def drop_unreferenced(conn: Connection, snapshots: Iterable[str]) -> list[IndexName]:
    """Drop each of `snapshots` that no alias target pins any more (caller's transaction); the dropped."""
    dropped: list[IndexName] = []
    for name in sorted(set(snapshots)):
        snapshot = IndexName.parse(name)
        frozen = snapshot.snapshot_of
        if frozen is None:
            continue  # a live index belongs to its collection, never to an alias
        _lock(conn, snapshot)
        pinned = conn.execute(
            "SELECT 1 FROM alias_targets WHERE index_name = %s AND index_version = %s LIMIT 1", frozen
        ).fetchone()
        if pinned is None and conn.execute("SELECT 1 FROM indexes WHERE name = %s", (snapshot,)).fetchone():
            drop_index_in(conn, snapshot)
            dropped.append(snapshot)
    return dropped


def _copy(
    conn: Connection,
    source: sql.Identifier,
    target: sql.Identifier,
    columns: tuple[str, ...],
    index: IndexName,
    snapshot: IndexName,
) -> None:
    listed = sql.SQL(", ").join(sql.Identifier(column) for column in columns)
    conn.execute(
        sql.SQL("INSERT INTO {} (index_name, {}) SELECT %s, {} FROM {} WHERE index_name = %s").format(
            target, listed, listed, source
        ),
        (snapshot, index),
    )


def _lock(conn: Connection, snapshot: IndexName) -> None:
    """Serialise creating and dropping one snapshot (aliases sharing it take different alias locks)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('chunkyard.snapshot:' || %s))", (snapshot,))
