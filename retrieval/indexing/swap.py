"""A large full build is published by building its partitions beside the live ones, then swapping them in.

Moving a million staged rows into the live partition row by row (`publishing._apply_in_place`) deletes
every old row and keeps the partition's B-trees up to date one row at a time. A first build or a full
rebuild of at least `swap_min_chunks()` chunks instead fills new tables with no index, builds their
keys once the rows are in (by sort), and at the end of the publish transaction drops the old
partitions and attaches the new ones under the same names. The postings, which need nothing the
embeddings make, are prepared by the BM25 stage (`create_next_postings`, `index_next_postings`): its
transaction commits them, keyed and analyzed, as a table no reader knows of, so the publish builds
only the chunk rows and their graph. Readers keep the old version until the publish commits (see
`retrieval.store.read_lock` for REPEATABLE READ readers), and a failed publish leaves the old version as it
was and the staging, prepared postings included, ready for a retry. Re-staging the index drops them
(`staging.clear_staging`). Incremental publishes keep the in-place path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from chunkyard.chunking.environment import env_int
from chunkyard.retrieval.indexing.hnsw import create_hnsw, has_graph, maintenance_work_mem
from chunkyard.retrieval.indexing.stage_reports import IndexingError
from chunkyard.retrieval.indexing.staging import insert_staged_chunks
from chunkyard.retrieval.store.bm25 import CorpusStats, refresh_stats
from chunkyard.retrieval.store.migrations import STAGING_TABLES
from chunkyard.retrieval.store.partitions import next_name, partition_names
from psycopg import Connection, sql

SWAP_MIN_CHUNKS_ENV = "CHUNKYARD_PUBLISH_SWAP_MIN_CHUNKS"
# below this many staged chunks a full build is applied in place: a few thousand rows cost
# milliseconds either way, and small builds keep the path incremental publishes take
SWAP_MIN_CHUNKS = 10_000
# the swap's ACCESS EXCLUSIVE locks wait at most this long per try for readers in flight (a long
# reader would otherwise queue every new reader behind the waiting swap), then the swap retries
SWAP_LOCK_TIMEOUT = "2s"
SWAP_LOCK_TRIES = 5

# (parent, partition key, its keys and indexes as (suffix, columns, primary key?)) in the live schema
_TABLES = (
    (
        "chunks",
        "chunks",
        (
            ("pkey", ("index_name", "chunk_id"), True),
            ("index_name_doc_id_idx", ("index_name", "doc_id"), False),
        ),
    ),
    (
        "bm25_postings",
        "postings",
        (
            ("pkey", ("index_name", "term", "chunk_id"), True),
            ("index_name_chunk_id_idx", ("index_name", "chunk_id"), False),
        ),
    ),
)


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
    row = conn.execute("SELECT version FROM indexes WHERE name = %s", (index_name,)).fetchone()
    return row is not None and int(row[0]) == 0


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
    if conn.execute("SELECT to_regclass(%s)", (postings_next,)).fetchone()[0] is None:
        raise IndexingError(
            f"publish: the postings stage_bm25 prepared for {index_name!r} are gone; re-run stage_bm25"
        )
    # held to the commit: re-staging the index (which drops them) waits for this publish
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(postings_next)))
    if old_chunks is None:
        old_chunks = int(
            conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(parts["chunks"]))
            ).fetchone()[0]
        )
    chunks_next = next_name(parts["chunks"])
    _create_next(conn, index_name, "chunks")
    # the same rows, in the same order, as the in-place path inserts
    inserted, inserted_length = insert_staged_chunks(conn, chunks_next, index_name)
    _build_keys(conn, index_name, "chunks")
    conn.execute("DELETE FROM bm25_terms WHERE index_name = %s", (index_name,))
    conn.execute(
        "INSERT INTO bm25_terms (index_name, term, df)"
        " SELECT index_name, term, df FROM staged_bm25_terms WHERE index_name = %s",
        (index_name,),
    )
    conn.execute("DELETE FROM index_documents WHERE index_name = %s", (index_name,))
    conn.execute(
        "INSERT INTO index_documents (index_name, doc_id, sha256)"
        " SELECT index_name, doc_id, sha256 FROM staged_documents WHERE index_name = %s",
        (index_name,),
    )
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
    _create_next(conn, index_name, "postings")
    return next_name(partition_names(index_name)["postings"])


def index_next_postings(conn: Connection, index_name: str) -> None:
    """The filled next postings table's keys, by sort, and its planner statistics (which stay with the
    table when the publish attaches it)."""
    _build_keys(conn, index_name, "postings")
    part = next_name(partition_names(index_name)["postings"])
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(part)))


def _create_next(conn: Connection, index_name: str, kind: str) -> None:
    """An empty table LIKE the parent of the partition `kind`, under the partition's next name, with a
    CHECK of the partition bound (so attaching it scans nothing)."""
    parent = next(parent for parent, k, _ in _TABLES if k == kind)
    part = next_name(partition_names(index_name)[kind])
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(part)))  # a killed build's
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION,"
            " CONSTRAINT {} CHECK (index_name = {}))"
        ).format(
            sql.Identifier(part),
            sql.Identifier(parent),
            sql.Identifier(f"{part}_key"),
            sql.Literal(index_name),  # DDL takes no parameters; the partition bound is the same literal
        )
    )


def _build_keys(conn: Connection, index_name: str, kind: str) -> None:
    """The primary key and B-trees of the loaded next table of `kind`, built by sort (caller's transaction)."""
    live = partition_names(index_name)[kind]
    keys = next(keys for _, k, keys in _TABLES if k == kind)
    conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(maintenance_work_mem())))
    for suffix, columns, primary in keys:
        listed = sql.SQL(", ").join(map(sql.Identifier, columns))
        name = sql.Identifier(next_name(f"{live}_{suffix}"))
        table = sql.Identifier(next_name(live))
        if primary:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(table, name, listed)
            )
        else:
            conn.execute(sql.SQL("CREATE INDEX {} ON {} ({})").format(name, table, listed))


def clear_staging_for_swap(conn: Connection, index_name: str) -> None:
    """Empty the index's staging: TRUNCATE each table that holds no other index's rows (deleting a
    million rows one by one is slower than the swap's whole build), DELETE from the others."""
    for table in STAGING_TABLES:
        ident = sql.Identifier(table)
        others = conn.execute(
            sql.SQL(
                "SELECT EXISTS (SELECT 1 FROM {0} WHERE index_name < %s)"
                " OR EXISTS (SELECT 1 FROM {0} WHERE index_name > %s)"
            ).format(ident),
            (index_name, index_name),
        ).fetchone()[0]
        if not others:
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(ident))
            # checked again under the lock: a stage of another index may have written meanwhile
            others = conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE index_name <> %s)").format(ident),
                (index_name,),
            ).fetchone()[0]
        if others:
            conn.execute(sql.SQL("DELETE FROM {} WHERE index_name = %s").format(ident), (index_name,))
        else:
            conn.execute(sql.SQL("TRUNCATE {}").format(ident))


def swap_in(conn: Connection, index_name: str) -> None:
    """Drop the live partitions and attach the ones `build_next` made under their names: the last
    statements of the publish transaction, so its ACCESS EXCLUSIVE locks last only until its commit."""
    parts = partition_names(index_name)
    _lock_live(conn, parts)
    for parent, kind, keys in _TABLES:
        live, part = parts[kind], next_name(parts[kind])
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(live)))
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(part), sql.Identifier(live))
        )
        names = [f"{live}_{suffix}" for suffix, _, _ in keys]
        if kind == "chunks":
            names.append(parts["hnsw"])
        for name in names:
            conn.execute(
                sql.SQL("ALTER INDEX IF EXISTS {} RENAME TO {}").format(
                    sql.Identifier(next_name(name)), sql.Identifier(name)
                )
            )
        # the CHECK constraint proves the partition bound: ATTACH scans no row
        conn.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.Identifier(parent), sql.Identifier(live), sql.Literal(index_name)
            )
        )
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                sql.Identifier(live), sql.Identifier(f"{part}_key")
            )
        )


def _lock_live(conn: Connection, parts: dict[str, str]) -> None:
    """The swap's locks: both parents (readers lock `chunks` first, see `retrieval.store.read_lock`) and the
    live partitions. Each try waits at most SWAP_LOCK_TIMEOUT, so a long reader holds up only the swap,
    not every reader queued behind it; the last try waits as long as it takes."""
    tables = [sql.SQL("ONLY chunks"), sql.SQL("ONLY bm25_postings")]
    tables += [sql.Identifier(parts[kind]) for kind in ("chunks", "postings")]
    statement = sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.SQL(", ").join(tables))
    previous = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
    for attempt in range(SWAP_LOCK_TRIES - 1):
        try:
            with conn.transaction():  # a savepoint: a timed-out try leaves the build intact
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (SWAP_LOCK_TIMEOUT,))
                conn.execute(statement)
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.1 * 2**attempt)
            continue
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (previous,))
        return
    conn.execute(statement)
