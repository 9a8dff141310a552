"""Stage 4: apply everything staged in ONE transaction and bump the index version.

A reader sees the old index or the new one, never a mix: removals, new chunks, vectors, postings
and BM25 statistics land together, and the HNSW graph is rebuilt after bulk loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chunkyard.retrieval.indexing.hnsw import check_storage, create_hnsw, has_graph
from chunkyard.retrieval.indexing.stage_reports import IndexingError, PublishReport, stage_timings
from chunkyard.retrieval.indexing.staging import check_owner, clear_staging
from chunkyard.retrieval.indexing.swap import POSTINGS_PREPARED, build_next, swap_in
from chunkyard.retrieval.lexical.languages import published_config
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store, published
from chunkyard.retrieval.store import staging as staging_rows
from chunkyard.retrieval.store.bm25 import CorpusStats, refresh_stats
from chunkyard.retrieval.store.indexes import partition_names
from chunkyard.retrieval.store.migrations import STAGING_TABLES
from psycopg import Connection
from psycopg.types.json import Jsonb

ANALYZE_SHARE = 0.1  # a publish changing at least this share of a partition's rows re-analyzes it
VACUUM_STAGING_CHUNKS = 1000  # a publish of at least this many chunks vacuums the staging tables
# any table an update writes is vacuumed once its dead rows reach this many and this share of its live
# rows (autovacuum's own default share); see `_vacuum_bloated`
VACUUM_MIN_DEAD = 1000
VACUUM_DEAD_SHARE = 0.2


PUBLISH_PHASES = 3  # rows and graph applied, version published, ANALYZE/VACUUM: `progress(done, 3)`


def publish(
    store: Store,
    spec: IndexSpec,
    *,
    owner: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PublishReport:
    """Apply everything staged for the index in ONE transaction and bump its version.

    With `owner`, only that run's staging is applied (`staging.check_owner`); before anything is
    applied, every staged vector must equal the cached embedding of its chunk's text (`_check_vectors`).
    """
    started = time.perf_counter()
    tick = progress or _no_progress  # the phases done, of PUBLISH_PHASES
    index_name = spec.name
    parts = partition_names(index_name)
    features = store.vector_features()
    report = PublishReport(
        index=index_name,
        vector_storage=spec.config.vector_storage,
        postgres_version=features.postgres_version,
        pgvector_version=features.pgvector_version,
    )
    with store.connection() as conn, conn.transaction():
        row = published.lock_version(conn, index_name)
        if row is None:
            raise IndexingError(f"publish: unknown index {index_name!r}; run stage_chunks first")
        version, old_dim = row
        run = staging_rows.read_staged_run(conn, index_name)
        check_owner("publish", index_name, owner, run.owner if run else None)
        if run is None:  # nothing staged: the published index is already current
            report.version = version
            report.chunks_total, report.documents_total = _sizes(conn, index_name, parts["chunks"])
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        full_rebuild, model_id = run.full_rebuild, run.model_id
        report.full_rebuild = bool(full_rebuild or version == 0)
        report.staged = dict(run.report)
        if run.config_hash != spec.config.config_hash:
            raise IndexingError(
                f"publish: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        staged_chunks, staged_removals = staging_rows.staged_counts(conn, index_name)
        if version > 0 and not full_rebuild and staged_chunks == 0 and staged_removals == 0:
            # nothing to index: keep the version (caches keyed on it stay valid), unless only the
            # retrieval options changed (hybrid, context_scoring: outside the config hash), which
            # are republished under a new version so every Searcher picks them up
            config = Jsonb(
                published_config(
                    spec.config.as_dict(),
                    report.staged,
                    lambda: published.published_bm25(conn, index_name),
                )
            )
            bumped = published.republish_config(conn, index_name, config)
            clear_staging(conn, index_name)
            report.published = bumped is not None
            version = bumped if bumped is not None else version
            report.version = version
            report.chunks_total, report.documents_total = _sizes(conn, index_name, parts["chunks"])
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        missing_vectors, missing_terms = staging_rows.missing_vectors_and_terms(conn, index_name)
        if missing_vectors:
            raise IndexingError(
                f"publish: {missing_vectors} staged chunks have no vector; run stage_embeddings"
            )
        if missing_terms:
            raise IndexingError(f"publish: {missing_terms} staged chunks have no BM25 terms; run stage_bm25")
        report.vectors_checked = _check_vectors(conn, index_name, model_id, report.staged)
        dims = staging_rows.staged_dims(conn, index_name)
        if len(dims) > 1:
            raise IndexingError(f"publish: staged vectors of {index_name!r} have mixed dimensions {dims}")
        new_dim = int(dims[0][0]) if dims else old_dim
        if old_dim and new_dim != old_dim and not full_rebuild:
            raise IndexingError(
                f"publish: staged vectors have {new_dim} dims but {index_name!r} has {old_dim}; re-run stage_chunks"
            )
        storage = spec.config.vector_storage
        if storage != "vector":  # before any change: an old pgvector has no halfvec
            check_storage(conn, storage, f"publish {index_name!r}: indexes.{spec.config.name}.vector_storage")

        # the published sizes, kept up to date by each publish (check_bm25_counts compares N with the
        # partition): an incremental publish adjusts them by what it removes and adds instead of scanning
        sizes = published.bm25_sizes(conn, index_name)

        # a large full build (the BM25 stage decided, and prepared its postings): new partitions beside
        # the live ones, swapped in at the end
        swapping = bool(report.staged.get(POSTINGS_PREPARED))
        if swapping and not report.full_rebuild:
            raise IndexingError(f"publish: {index_name!r} is no longer a full build; re-run stage_bm25")
        if swapping:
            old = int(sizes[0]) if sizes else None
            build = build_next(conn, index_name, int(new_dim), storage, old)
            report.chunks_deleted, report.chunks_inserted, stats = build.deleted, build.inserted, build.stats
            if build.hnsw_seconds is not None:
                report.hnsw_built, report.hnsw_seconds = True, build.hnsw_seconds
        else:
            stats = _apply_in_place(
                conn,
                index_name,
                report,
                sizes,
                bool(full_rebuild),
                int(staged_chunks),
                (old_dim, new_dim),
                storage,
            )
        report.bm25_vocabulary = stats.vocab_size
        tick(1, PUBLISH_PHASES)

        new_version = published.publish_version(
            conn,
            index_name,
            Jsonb(
                published_config(
                    spec.config.as_dict(),
                    report.staged,
                    lambda: published.published_bm25(conn, index_name),
                )
            ),
            spec.config.config_hash,
            model_id,
            new_dim,
        )
        if swapping:
            staging_rows.empty_staging_for_swap(conn, index_name)
            swap_in(conn, index_name)  # last: its locks last only until the commit
        else:
            clear_staging(conn, index_name)
        report.version = int(new_version)
        report.published = True
        report.chunks_total = stats.n_docs
        report.documents_total = published.count_index_documents(conn, index_name)
    tick(2, PUBLISH_PHASES)
    _analyze_partition(store, parts["chunks"], report)
    if not swapping:  # a swap's postings were analyzed before they were attached
        _analyze_partition(store, parts["postings"], report)
    vacuumed = _vacuum_staging(store, report)
    report.tables_vacuumed = len(vacuumed) + len(_vacuum_bloated(store, parts, vacuumed))
    tick(PUBLISH_PHASES, PUBLISH_PHASES)
    report.seconds = round(time.perf_counter() - started, 3)
    report.timings = stage_timings(report.staged, report.seconds, report.hnsw_seconds)
    return report


def _no_progress(done: int, total: int) -> None:
    pass


def _apply_in_place(
    conn: Connection,
    index_name: str,
    report: PublishReport,
    sizes: tuple[int, int] | None,
    full_rebuild: bool,
    staged_chunks: int,
    dims: tuple[int | None, int | None],
    storage: str,
) -> CorpusStats:
    """Removals, new chunks with vectors, postings, BM25 terms and statistics, and the HNSW graph, applied
    to the live partitions inside the publish transaction; returns the new BM25 statistics."""
    parts = partition_names(index_name)
    old_dim, new_dim = dims

    # 1. removals: old chunks of changed, deleted (or, on a rebuild, all) documents, with their postings
    deleted, deleted_length = published.remove_chunks(
        conn, index_name, parts["chunks"], parts["postings"], bool(full_rebuild)
    )
    report.chunks_deleted = int(deleted)
    published.delete_index_documents(conn, index_name, removed_only=not full_rebuild)

    # 2. HNSW: bulk loads drop the graph and rebuild it after the load (much faster than inserting)
    incremental = sizes is not None and not report.full_rebuild
    if incremental:
        remaining = int(sizes[0]) - report.chunks_deleted
    else:
        remaining = published.count_rows(conn, parts["chunks"])
    incoming = int(staged_chunks)
    hnsw_exists = published.relation_exists(conn, parts["hnsw"])
    if hnsw_exists and (incoming > remaining or new_dim != old_dim):
        published.drop_graph(conn, parts["hnsw"])
        hnsw_exists = False

    # 3. new chunks with vectors and BM25 lengths, postings, document frequencies
    inserted_length = 0
    if incoming:  # a delete stages no chunk: nothing to insert
        inserted, inserted_length = published.insert_staged_chunks(conn, parts["chunks"], index_name)
        report.chunks_inserted = int(inserted)
        published.insert_staged_postings(conn, parts["postings"], index_name)
        published.insert_staged_terms(conn, index_name, add=True)
    published.insert_staged_index_documents(conn, index_name, update=True)
    new_sizes = None
    if incremental:
        new_sizes = (
            remaining + report.chunks_inserted,
            int(sizes[1]) - int(deleted_length) + int(inserted_length),
        )
    stats = refresh_stats(conn, index_name, parts["chunks"], new_sizes)

    # 4. the per-partition HNSW graph on the vector cast to this index's dimension and storage
    # pgvector indexes at most 2,000 dimensions as vector, 4,000 as halfvec: wider ones are searched exactly.
    if not hnsw_exists and stats.n_docs > 0 and has_graph(new_dim, storage):
        hnsw_started = time.perf_counter()
        create_hnsw(conn, index_name, int(new_dim), storage)
        report.hnsw_built = True
        report.hnsw_seconds = round(time.perf_counter() - hnsw_started, 3)
    return stats


def _check_vectors(conn: Connection, index_name: str, model_id: str | None, staged: dict) -> int:
    """Every staged vector is the model's embedding of its own chunk's text: it equals the cache's
    vector for the chunk's content hash (the embeddings stage caches every vector it computes).

    A mismatch means two runs' stages crossed (text of one, vector of the other): publishing it
    would serve a vector for text it does not embed, for as long as the document stays unchanged.
    Vectors computed while chunking (late chunking: in the context of the whole document) have no
    cache entry and are not checked. Returns the number of vectors checked.
    """
    if model_id is None or int(staged.get("chunks_precomputed_embeddings") or 0) > 0:
        return 0
    check = staging_rows.compare_with_cache(conn, index_name, model_id)
    if check.wrong:
        raise IndexingError(
            f"publish: {check.wrong} staged vector(s) of {index_name!r} are not the embedding of their chunk's "
            f"text (e.g. chunk {check.example!r}); nothing published, re-run the index's stages"
        )
    return check.checked


def _analyze_partition(store: Store, partition: str, report: PublishReport) -> None:
    """Fresh planner statistics after big changes, so queries keep choosing the HNSW index.

    A change of under ANALYZE_SHARE of the partition's rows is left to autovacuum, whose analyze
    threshold (50 rows + 10 %) catches up with it: a one-document update skips a full ANALYZE.
    """
    changed = report.chunks_inserted + report.chunks_deleted
    if changed == 0 or changed < ANALYZE_SHARE * report.chunks_total:
        return
    with store.connection() as conn:
        published.analyze(conn, partition)


def _vacuum_staging(store: Store, report: PublishReport) -> set[str]:
    """After a bulk publish, VACUUM (ANALYZE) the staging tables it emptied; returns the tables vacuumed.

    `clear_staging` leaves the bulk's rows dead: until autovacuum comes round, every later update
    scans their pages and is planned for the bulk's row counts. Measured on the 1,000-document
    collection (ONNX int8): one changed document then cost 83-87 ms besides the model call, against
    69-75 ms after this VACUUM, which itself took 25-45 ms.
    """
    if report.chunks_inserted + report.chunks_deleted < VACUUM_STAGING_CHUNKS:
        return set()
    with store.connection() as conn:
        published.vacuum_analyze(conn, STAGING_TABLES)
    return set(STAGING_TABLES)


def _vacuum_bloated(store: Store, parts: dict[str, str], done: set[str]) -> list[str]:
    """VACUUM the tables an update writes whose dead rows reached VACUUM_MIN_DEAD and VACUUM_DEAD_SHARE
    of their live rows (the counts of `pg_stat_user_tables`, which lag the last second); returns them.

    Autovacuum first looks at a database a minute (`autovacuum_naptime`) after the server starts, and
    the embedded server stops with the `chunkyard` process that started it: a user running short
    processes (cron, a CLI per change) never gets one. Measured on the 1,000-document collection after
    150 such updates (about 20k dead rows each in `staged_bm25` and the postings partition): the publish
    step took 28-33 ms before a VACUUM and 20-26 ms after. Where autovacuum does run, it keeps the dead
    rows under its own lower threshold and this finds nothing to do.
    """
    tables = [*STAGING_TABLES, parts["chunks"], parts["postings"], "bm25_terms", "bm25_stats"]
    tables += ["index_documents", "indexes", "documents"]
    with store.connection() as conn:
        due = published.bloated(
            conn, [t for t in tables if t not in done], VACUUM_MIN_DEAD, VACUUM_DEAD_SHARE
        )
        # SKIP_LOCKED: a table another VACUUM (autovacuum's or a concurrent publish's) holds is left to it;
        # staging tables also get fresh planner statistics, as their sizes swing most
        for table in due:
            published.vacuum(conn, table, analyze=table in STAGING_TABLES)
    return due


def _sizes(conn: Connection, index_name: str, chunks: str) -> tuple[int, int]:
    return published.count_rows(conn, chunks), published.count_index_documents(conn, index_name)
