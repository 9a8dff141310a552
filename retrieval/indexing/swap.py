"""A large full build is published by building its partitions beside the live ones, then swapping them in.

Moving a million staged rows into the live partition row by row (`publishing._apply_in_place`) deletes
every old row and keeps the partition's B-trees up to date one row at a time. A first build or a full
rebuild of at least `swap_min_chunks()` chunks instead fills new tables with no index, builds their
keys once the rows are in (by sort), and at the end of the publish transaction drops the old
partitions and attaches the new ones under the same names. The postings, which need nothing the
embeddings make, are prepared by the BM25 stage (`create_next_postings`, `index_next_postings`): its
transaction commits them, keyed and analyzed, as a table no reader knows of, so the publish builds
only the chunk rows and their graph. Readers keep the old version until the publish commits (see
`retrieval.store.published_chunks.READ_LOCK` for REPEATABLE READ readers), and a failed publish leaves the old version as it
was and the staging, prepared postings included, ready for a retry. Re-staging the index drops them
(`staging.clear_staging`). Incremental publishes keep the in-place path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from chunkyard.chunking.environment import env_int
from chunkyard.retrieval.indexing.hnsw import create_hnsw, has_graph, maintenance_work_mem
from chunkyard.retrieval.indexing.stage_reports import IndexingError
from chunkyard.retrieval.store import published
from chunkyard.retrieval.store.bm25 import CorpusStats, refresh_stats
from chunkyard.retrieval.store.indexes import next_name, partition_names
from chunkyard.retrieval.store.published import analyze, relation_exists
from psycopg import Connection

SWAP_MIN_CHUNKS_ENV = "CHUNKYARD_PUBLISH_SWAP_MIN_CHUNKS"
# below this many staged chunks a full build is applied in place: a few thousand rows cost
# milliseconds either way, and small builds keep the path incremental publishes take
SWAP_MIN_CHUNKS = 10_000
# the swap's ACCESS EXCLUSIVE locks wait at most this long per try for readers in flight (a long
# reader would otherwise queue every new reader behind the waiting swap), then the swap retries
SWAP_LOCK_TIMEOUT = "2s"
SWAP_LOCK_TRIES = 5


# the BM25 stage's report says it prepared the postings for a swap (the publish swaps exactly then)
POSTINGS_PREPARED = "postings_prepared_for_swap"


def swap_min_chunks() -> int:
    """The smallest full build published by a swap (CHUNKYARD_PUBLISH_SWAP_MIN_CHUNKS)."""
    return int(env_int(SWAP_MIN_CHUNKS_ENV, SWAP_MIN_CHUNKS))


def swaps(conn: Connection, index_name: str, full_rebuild: bool, staged_chunks: int) -> bool:
    """Whether the staged build is published by a swap: a full build (a rebuild or the index's first
    version) of at least `swap_min_chunks()` chunks. Decided once, by the BM25 stage."""
    if staged_chunks < swap_min_chunks():
        return False
    if full_rebuild:
        return True
    return published.version_of(conn, index_name) == 0


@dataclass
class SwapBuild:
    """What `build_next` loaded: rows, the old version's size, the statistics, the graph's seconds."""

    inserted: int
    deleted: int
    stats: CorpusStats
    hnsw_seconds: float | None = None


def build_next(
    conn: Connection, index_name: str, dim: int, storage: str, old_chunks: int | None
) -> SwapBuild:
    """The new version's chunks partition and graph, beside the live one, with the index's BM25 terms,
    documents and statistics replaced (caller's transaction, which also swaps them in: `swap_in`).

    `old_chunks` is the live version's size from its BM25 statistics (None: counted). The postings
    partition must have been prepared by the BM25 stage.
    """
    parts = partition_names(index_name)
    postings_next = next_name(parts["postings"])
    if not relation_exists(conn, postings_next):
        raise IndexingError(
            f"publish: the postings stage_bm25 prepared for {index_name!r} are gone; re-run stage_bm25"
        )
    # held to the commit: re-staging the index (which drops them) waits for this publish
    published.lock_next(conn, postings_next)
    if old_chunks is None:
        old_chunks = published.count_rows(conn, parts["chunks"])
    chunks_next = next_name(parts["chunks"])
    published.create_next(conn, index_name, "chunks")
    # the same rows, in the same order, as the in-place path inserts
    inserted, inserted_length = published.insert_staged_chunks(conn, chunks_next, index_name)
    published.build_keys(conn, index_name, "chunks", maintenance_work_mem())
    published.delete_terms(conn, index_name)
    published.insert_staged_terms(conn, index_name, add=False)
    published.delete_index_documents(conn, index_name, removed_only=False)
    published.insert_staged_index_documents(conn, index_name, update=False)
    stats = refresh_stats(conn, index_name, chunks_next, (int(inserted), int(inserted_length)))
    build = SwapBuild(inserted=int(inserted), deleted=int(old_chunks), stats=stats)
    if stats.n_docs > 0 and has_graph(dim, storage):
        started = time.perf_counter()
        create_hnsw(conn, index_name, dim, storage, table=chunks_next, name=next_name(parts["hnsw"]))
        build.hnsw_seconds = round(time.perf_counter() - started, 3)
    return build


def create_next_postings(conn: Connection, index_name: str) -> str:
    """An empty table for the next version's postings beside the live partition (the BM25 stage's
    transaction, which fills it and then calls `index_next_postings`); returns its name."""
    published.create_next(conn, index_name, "postings")
    return next_name(partition_names(index_name)["postings"])


def index_next_postings(conn: Connection, index_name: str) -> None:
    """The filled next postings table's keys, by sort, and its planner statistics (which stay with the
    table when the publish attaches it)."""
    published.build_keys(conn, index_name, "postings", maintenance_work_mem())
    analyze(conn, next_name(partition_names(index_name)["postings"]))


def swap_in(conn: Connection, index_name: str) -> None:
    """Drop the live partitions and attach the ones `build_next` made under their names: the last
    statements of the publish transaction, so its ACCESS EXCLUSIVE locks last only until its commit.
    Each try for the locks waits at most SWAP_LOCK_TIMEOUT (SWAP_LOCK_TRIES tries, the last unbounded)."""
    published.swap_in(conn, index_name, SWAP_LOCK_TIMEOUT, SWAP_LOCK_TRIES)
