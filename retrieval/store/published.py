"""An index's published rows written from its staging, in place or by a partition swap, and their upkeep."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg
from chunkyard.retrieval.store.bm25 import CorpusStats, refresh_stats
from chunkyard.retrieval.store.indexes import (
    Graph,
    build_keys,
    create_graph,
    create_next,
    drop_graph,
    has_graph,
    next_name,
    partition_names,
    relation_exists,
)
from chunkyard.retrieval.store.migrations import (
    CHUNK_COLUMNS,
    INDEX_DOCUMENT_COLUMNS,
    PARTITIONED,
    POSTING_COLUMNS,
    STAGED_CHUNK_COLUMNS,
    TERM_COLUMNS,
    column_names,
)
from chunkyard.retrieval.store.staging import clear_staging, empty_staging_for_swap
from psycopg import Connection, sql
from psycopg.types.json import Jsonb

# An index's published rows written from its staging: the `indexes` row's version, chunks and postings
# partitions, BM25 document frequencies and the documents it was built from (`index_documents`).
#
# Every function runs on the caller's connection and inside its transaction: publish and stage_chunks
# (`retrieval.indexing`) keep their transactions and locks, the statements live here.


def _listed(columns: Sequence[str], prefix: str | None = None) -> sql.Composed:
    """`columns` as a statement's column list, each qualified by the table alias `prefix` if given."""
    if prefix is None:
        return sql.SQL(", ").join(sql.Identifier(name) for name in columns)
    return sql.SQL(", ").join(sql.Identifier(prefix, name) for name in columns)


def lock_index(conn: Connection, index_name: str) -> None:
    """Lock the index's `indexes` row until the transaction ends."""
    conn.execute("SELECT 1 FROM indexes WHERE name = %s FOR UPDATE", (index_name,))


def lock_version(conn: Connection, index_name: str) -> tuple[int, int | None] | None:
    """(published version, vector dimension) of the index, its row locked until the transaction ends;
    None: no such index."""
    row = conn.execute(
        "SELECT version, dim FROM indexes WHERE name = %s FOR UPDATE", (index_name,)
    ).fetchone()
    return None if row is None else (int(row[0]), row[1])


def version_of(conn: Connection, index_name: str) -> int | None:
    """The index's published version (0: never published); None: no such index."""
    row = conn.execute("SELECT version FROM indexes WHERE name = %s", (index_name,)).fetchone()
    return None if row is None else int(row[0])


def republish_config(conn: Connection, index_name: str, config: Jsonb) -> int | None:
    """A new version carrying `config` when it differs from the published one; the new version, or None
    when it is the same (the version is kept)."""
    row = conn.execute(
        "UPDATE indexes SET version = version + 1, published_at = now(), config = %s"
        " WHERE name = %s AND config IS DISTINCT FROM %s RETURNING version",
        (config, index_name, config),
    ).fetchone()
    return None if row is None else int(row[0])


def republish(conn: Connection, index_name: str, config: Jsonb) -> tuple[int | None, tuple[int, int]]:
    """Nothing staged to index: a new version carrying `config` if it differs (`republish_config`), the
    staging emptied; (the new version or None, the published (chunks, documents))."""
    bumped = republish_config(conn, index_name, config)
    clear_staging(conn, index_name)
    return bumped, sizes(conn, index_name)


def publish_version(
    conn: Connection, index_name: str, config: Jsonb, config_hash: str, model_id: str | None, dim: int | None
) -> int:
    """Bump the index's version, recording its config, model (None: the one it had) and dimension; the new version."""
    row = conn.execute(
        "UPDATE indexes SET version = version + 1, published_at = now(), config = %s, config_hash = %s,"
        " model_id = coalesce(%s, model_id), dim = %s WHERE name = %s RETURNING version",
        (config, config_hash, model_id, dim, index_name),
    ).fetchone()
    return int(row[0])


def count_rows(conn: Connection, table: str) -> int:
    """The rows of `table` (a partition, or a table being built beside one)."""
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0])


def insert_staged_chunks(conn: Connection, table: str, index_name: str) -> tuple[int, int]:
    """Copy an index's staged chunks, with their vectors and BM25 lengths, into `table` (its partition, or
    the swap's new table); returns (rows, sum of BM25 lengths)."""
    staged = column_names(STAGED_CHUNK_COLUMNS)
    published = column_names(CHUNK_COLUMNS)  # the staged columns, then bm25_length and embedding
    inserted, length = conn.execute(
        sql.SQL(
            "WITH i AS (INSERT INTO {} (index_name, {})"
            " SELECT s.index_name, {}, l.length, e.embedding"
            " FROM staged_chunks s"
            " JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
            " JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
            " WHERE s.index_name = %s RETURNING bm25_length)"
            " SELECT count(*), coalesce(sum(bm25_length), 0) FROM i"
        ).format(sql.Identifier(table), _listed(published), _listed(staged, "s")),
        (index_name,),
    ).fetchone()
    return int(inserted), int(length)


def insert_staged_postings(conn: Connection, table: str, index_name: str) -> None:
    """Copy an index's staged BM25 postings, with each chunk's length, into `table`."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (index_name, {})"
            " SELECT b.index_name, b.term, b.chunk_id, b.tf, l.length FROM staged_bm25 b"
            " JOIN staged_bm25_lengths l ON l.index_name = b.index_name AND l.chunk_id = b.chunk_id"
            " WHERE b.index_name = %s"
        ).format(sql.Identifier(table), _listed(column_names(POSTING_COLUMNS))),
        (index_name,),
    )


def remove_chunks(
    conn: Connection, index_name: str, chunks: str, postings: str, full_rebuild: bool
) -> tuple[int, int]:
    """Delete from the `chunks` and `postings` partitions the old chunks of the staged removals (on a
    rebuild, all of them) with their postings and document frequencies; returns (chunks deleted, their
    total BM25 length)."""
    chunks_t, postings_t = sql.Identifier(chunks), sql.Identifier(postings)
    conn.execute("CREATE TEMP TABLE _removed (chunk_id text PRIMARY KEY) ON COMMIT DROP")
    removing = conn.execute(
        sql.SQL(
            "INSERT INTO _removed SELECT c.chunk_id FROM {} c WHERE c.index_name = %s"
            " AND (%s OR c.doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s))"
        ).format(chunks_t),
        (index_name, full_rebuild, index_name),
    ).rowcount
    if not removing:  # only added documents
        return 0, 0
    # planner statistics for the temp table: without them it hash-joins a whole postings partition
    # (30 ms at 100k postings) where the chunk_id index finds a one-document removal's rows
    conn.execute("ANALYZE _removed")
    if full_rebuild:  # every chunk goes, so does every term
        delete_terms(conn, index_name)
    else:
        lowered = conn.execute(
            sql.SQL(
                "UPDATE bm25_terms t SET df = t.df - d.n FROM (SELECT p.term, count(*) AS n FROM {} p"
                " JOIN _removed r ON r.chunk_id = p.chunk_id WHERE p.index_name = %s GROUP BY p.term) d"
                " WHERE t.index_name = %s AND t.term = d.term RETURNING t.term, t.df"
            ).format(postings_t),
            (index_name, index_name),
        ).fetchall()
        emptied = [term for term, df in lowered if df <= 0]  # deleted by key: no vocabulary scan
        if emptied:
            conn.execute(
                "DELETE FROM bm25_terms WHERE index_name = %s AND term = ANY(%s) AND df <= 0",
                (index_name, emptied),
            )
    conn.execute(
        sql.SQL(
            "DELETE FROM {} p USING _removed r WHERE p.index_name = %s AND p.chunk_id = r.chunk_id"
        ).format(postings_t),
        (index_name,),
    )
    deleted, length = conn.execute(
        sql.SQL(
            "WITH d AS (DELETE FROM {} c USING _removed r WHERE c.index_name = %s"
            " AND c.chunk_id = r.chunk_id RETURNING c.bm25_length)"
            " SELECT count(*), coalesce(sum(bm25_length), 0) FROM d"
        ).format(chunks_t),
        (index_name,),
    ).fetchone()
    return int(deleted), int(length)


def delete_terms(conn: Connection, index_name: str) -> None:
    """Delete every BM25 document frequency of the index."""
    conn.execute("DELETE FROM bm25_terms WHERE index_name = %s", (index_name,))


def insert_staged_terms(conn: Connection, index_name: str, *, add: bool) -> None:
    """Copy the index's staged document frequencies into `bm25_terms`; with `add`, a term already
    there gets the staged frequency added to its own."""
    listed = _listed(("index_name", *column_names(TERM_COLUMNS)))
    statement = "INSERT INTO bm25_terms ({}) SELECT {} FROM staged_bm25_terms WHERE index_name = %s"
    if add:
        statement += " ON CONFLICT (index_name, term) DO UPDATE SET df = bm25_terms.df + excluded.df"
    conn.execute(sql.SQL(statement).format(listed, listed), (index_name,))


def delete_index_documents(conn: Connection, index_name: str, *, removed_only: bool) -> None:
    """Delete the index's `index_documents` rows: all of them, or with `removed_only` those of its staged removals."""
    if removed_only:
        conn.execute(
            "DELETE FROM index_documents WHERE index_name = %s"
            " AND doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s)",
            (index_name, index_name),
        )
    else:
        conn.execute("DELETE FROM index_documents WHERE index_name = %s", (index_name,))


def insert_staged_index_documents(conn: Connection, index_name: str, *, update: bool) -> None:
    """Copy the index's staged documents into `index_documents`; with `update`, a document already there
    takes the staged sha256."""
    listed = _listed(("index_name", *column_names(INDEX_DOCUMENT_COLUMNS)))
    statement = "INSERT INTO index_documents ({}) SELECT {} FROM staged_documents WHERE index_name = %s"
    if update:
        statement += " ON CONFLICT (index_name, doc_id) DO UPDATE SET sha256 = excluded.sha256"
    conn.execute(sql.SQL(statement).format(listed, listed), (index_name,))


def count_index_documents(conn: Connection, index_name: str) -> int:
    """The documents the published index was built from."""
    row = conn.execute("SELECT count(*) FROM index_documents WHERE index_name = %s", (index_name,)).fetchone()
    return int(row[0])


# The swap of the tables a large full build fills beside an index's live partitions (`indexes.create_next`)
# for the live ones: in the publish's transaction, which keeps its locks to the commit.
def lock_next(conn: Connection, table: str) -> None:
    """Hold `table` (a next table) to the commit: re-staging the index (which drops it) waits."""
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table)))


def swap_in(conn: Connection, index_name: str, lock_timeout: str, lock_tries: int) -> None:
    """Drop the live partitions and attach the next tables under their names (see `lock_live` for the
    locks, `lock_timeout` and `lock_tries`)."""
    parts = partition_names(index_name)
    lock_live(conn, parts, lock_timeout, lock_tries)
    for parent, kind, keys in PARTITIONED:
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


# the swap's ACCESS EXCLUSIVE locks wait at most this long per try for readers in flight (a long
# reader would otherwise queue every new reader behind the waiting swap), then the swap retries
SWAP_LOCK_TIMEOUT = "2s"
SWAP_LOCK_TRIES = 5


def lock_live(conn: Connection, parts: dict[str, str], lock_timeout: str, lock_tries: int) -> None:
    """The swap's locks: both parents (readers lock `chunks` first, see `retrieval.store.published_chunks.READ_LOCK`) and the
    live partitions. Each of the first `lock_tries - 1` tries waits at most `lock_timeout`, so a long
    reader holds up only the swap, not every reader queued behind it; the last waits as long as it takes."""
    tables = [sql.SQL("ONLY chunks"), sql.SQL("ONLY bm25_postings")]
    tables += [sql.Identifier(parts[kind]) for kind in ("chunks", "postings")]
    statement = sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.SQL(", ").join(tables))
    previous = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
    for attempt in range(lock_tries - 1):
        try:
            with conn.transaction():  # a savepoint: a timed-out try leaves the build intact
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (lock_timeout,))
                conn.execute(statement)
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.1 * 2**attempt)
            continue
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (previous,))
        return
    conn.execute(statement)


# The publish transaction's writes, in their order: `apply` is the one call the publish stage makes.
@dataclass(frozen=True)
class PublishPlan:
    """What the publish stage checked and decided before `apply`: the staged run's rebuild flag, whether the
    new version is a full build (a rebuild, or the first version), the staged chunks, the dimensions
    (published, staged), the published sizes (`bm25_sizes`), a swap or in place, the graph, and the new
    version's `indexes` row (config, its hash, the model: None keeps the one it had)."""

    index_name: str
    staged_rebuild: bool
    full_build: bool
    staged_chunks: int
    dims: tuple[int | None, int | None]
    sizes: tuple[int, int] | None
    swap: bool
    graph: Graph
    config: Jsonb
    config_hash: str
    model_id: str | None


@dataclass
class Applied:
    """What `apply` did: chunks removed and inserted, the new BM25 statistics, the graph's build seconds
    (None: not built), the new version and the documents it was built from."""

    deleted: int
    inserted: int
    stats: CorpusStats
    hnsw_seconds: float | None = None
    version: int = 0
    documents: int = 0


def apply(conn: Connection, plan: PublishPlan, rows_applied: Callable[[], None]) -> Applied:
    """Everything staged for the index, applied in the caller's (the publish's) transaction: the rows and
    graph (in place, or built beside the live partitions), `rows_applied()`, the new version, the emptied
    staging and, for a swap, the new partitions swapped in last (its locks last only until the commit)."""
    parts = partition_names(plan.index_name)
    done = _build_next(conn, plan, parts) if plan.swap else _apply_in_place(conn, plan, parts)
    rows_applied()
    done.version = publish_version(
        conn, plan.index_name, plan.config, plan.config_hash, plan.model_id, plan.dims[1]
    )
    if plan.swap:
        empty_staging_for_swap(conn, plan.index_name)
        swap_in(conn, plan.index_name, SWAP_LOCK_TIMEOUT, SWAP_LOCK_TRIES)
    else:
        clear_staging(conn, plan.index_name)
    done.documents = count_index_documents(conn, plan.index_name)
    return done


def _apply_in_place(conn: Connection, plan: PublishPlan, parts: dict[str, str]) -> Applied:
    """Removals, new chunks with vectors, postings, BM25 terms and statistics, and the HNSW graph, applied
    to the live partitions."""
    index_name, (old_dim, new_dim) = plan.index_name, plan.dims
    # 1. removals: old chunks of changed, deleted (or, on a rebuild, all) documents, with their postings
    deleted, deleted_length = remove_chunks(
        conn, index_name, parts["chunks"], parts["postings"], plan.staged_rebuild
    )
    delete_index_documents(conn, index_name, removed_only=not plan.staged_rebuild)

    # 2. HNSW: bulk loads drop the graph and rebuild it after the load (much faster than inserting)
    incremental = plan.sizes is not None and not plan.full_build
    remaining = plan.sizes[0] - int(deleted) if incremental else count_rows(conn, parts["chunks"])
    hnsw_exists = relation_exists(conn, parts["hnsw"])
    if hnsw_exists and (plan.staged_chunks > remaining or new_dim != old_dim):
        drop_graph(conn, parts["hnsw"])
        hnsw_exists = False

    # 3. new chunks with vectors and BM25 lengths, postings, document frequencies
    inserted, inserted_length = 0, 0
    if plan.staged_chunks:  # a delete stages no chunk: nothing to insert
        inserted, inserted_length = insert_staged_chunks(conn, parts["chunks"], index_name)
        insert_staged_postings(conn, parts["postings"], index_name)
        insert_staged_terms(conn, index_name, add=True)
    insert_staged_index_documents(conn, index_name, update=True)
    new_sizes = None
    if incremental:
        new_sizes = (remaining + int(inserted), plan.sizes[1] - int(deleted_length) + int(inserted_length))
    stats = refresh_stats(conn, index_name, parts["chunks"], new_sizes)
    done = Applied(deleted=int(deleted), inserted=int(inserted), stats=stats)

    # 4. the per-partition HNSW graph on the vector cast to this index's dimension and storage
    # pgvector indexes at most 2,000 dimensions as vector, 4,000 as halfvec: wider ones are searched exactly.
    if not hnsw_exists and stats.n_docs > 0 and has_graph(new_dim, plan.graph.storage):
        started = time.perf_counter()
        create_graph(conn, parts["chunks"], parts["hnsw"], int(new_dim), plan.graph)
        done.hnsw_seconds = round(time.perf_counter() - started, 3)
    return done


def _build_next(conn: Connection, plan: PublishPlan, parts: dict[str, str]) -> Applied:
    """The new version's chunks partition and graph, beside the live one, with the index's BM25 terms,
    documents and statistics replaced; the postings' next table was prepared by the BM25 stage."""
    index_name, dim = plan.index_name, int(plan.dims[1])
    postings_next, chunks_next = next_name(parts["postings"]), next_name(parts["chunks"])
    # held to the commit: re-staging the index (which drops them) waits for this publish
    lock_next(conn, postings_next)
    old_chunks = plan.sizes[0] if plan.sizes else count_rows(conn, parts["chunks"])
    create_next(conn, index_name, "chunks")
    # the same rows, in the same order, as the in-place path inserts
    inserted, inserted_length = insert_staged_chunks(conn, chunks_next, index_name)
    build_keys(conn, index_name, "chunks", plan.graph.work_mem)
    delete_terms(conn, index_name)
    insert_staged_terms(conn, index_name, add=False)
    delete_index_documents(conn, index_name, removed_only=False)
    insert_staged_index_documents(conn, index_name, update=False)
    stats = refresh_stats(conn, index_name, chunks_next, (int(inserted), int(inserted_length)))
    done = Applied(deleted=int(old_chunks), inserted=int(inserted), stats=stats)
    if stats.n_docs > 0 and has_graph(dim, plan.graph.storage):
        started = time.perf_counter()
        create_graph(conn, chunks_next, next_name(parts["hnsw"]), dim, plan.graph)
        done.hnsw_seconds = round(time.perf_counter() - started, 3)
    return done


def sizes(conn: Connection, index_name: str) -> tuple[int, int]:
    """(chunks in the index's partition, documents it was built from)."""
    documents = count_index_documents(conn, index_name)
    return count_rows(conn, partition_names(index_name)["chunks"]), documents
