"""A large full build is published by building its partitions beside the live ones, then swapping them in.

Moving a million staged rows into the live partition row by row (`published.apply` in place) deletes
every old row and keeps the partition's B-trees up to date one row at a time. A first build or a full
rebuild of at least `swap_min_chunks()` chunks instead fills new tables with no index, builds their
keys once the rows are in (by sort), and at the end of the publish transaction drops the old
partitions and attaches the new ones under the same names. The postings, which need nothing the
embeddings make, are prepared by the BM25 stage (`retrieval.store.staging.stage_postings`; the same
steps one by one: `create_next_postings`, `index_next_postings`): its transaction commits them, keyed and analyzed, as a table no reader knows of, so the publish builds
only the chunk rows and their graph (`retrieval.store.published.apply`). Readers keep the old version until the publish commits (see
`retrieval.store.published_chunks.READ_LOCK` for REPEATABLE READ readers), and a failed publish leaves the old version as it
was and the staging, prepared postings included, ready for a retry. Re-staging the index drops them
(`stage_chunks`, by `store.indexes.drop_next_tables`). Incremental publishes keep the in-place path.
"""

from __future__ import annotations

from chunkyard.chunking.environment import env_int
from chunkyard.retrieval.indexing.hnsw import maintenance_work_mem
from chunkyard.retrieval.store.indexes import analyze, build_keys, create_next, next_name, partition_names
from psycopg import Connection

SWAP_MIN_CHUNKS_ENV = "CHUNKYARD_PUBLISH_SWAP_MIN_CHUNKS"
# below this many staged chunks a full build is applied in place: a few thousand rows cost
# milliseconds either way, and small builds keep the path incremental publishes take
SWAP_MIN_CHUNKS = 10_000


# the BM25 stage's report says it prepared the postings for a swap (the publish swaps exactly then)
POSTINGS_PREPARED = "postings_prepared_for_swap"


def swap_min_chunks() -> int:
    """The smallest full build published by a swap (CHUNKYARD_PUBLISH_SWAP_MIN_CHUNKS)."""
    return int(env_int(SWAP_MIN_CHUNKS_ENV, SWAP_MIN_CHUNKS))


def swaps(full_rebuild: bool, staged_chunks: int, version: int | None) -> bool:
    """Whether the staged build is published by a swap: a full build (a rebuild, or the index's first
    version: `version`, the published one, is 0) of at least `swap_min_chunks()` chunks. Decided once,
    by the BM25 stage."""
    if staged_chunks < swap_min_chunks():
        return False
    if full_rebuild:
        return True
    return version == 0


def create_next_postings(conn: Connection, index_name: str) -> str:
    """An empty table for the next version's postings beside the live partition (the BM25 stage's
    transaction, which fills it and then calls `index_next_postings`); returns its name."""
    create_next(conn, index_name, "postings")
    return next_name(partition_names(index_name)["postings"])


def index_next_postings(conn: Connection, index_name: str) -> None:
    """The filled next postings table's keys, by sort, and its planner statistics (which stay with the
    table when the publish attaches it)."""
    build_keys(conn, index_name, "postings", maintenance_work_mem())
    analyze(conn, next_name(partition_names(index_name)["postings"]))
