"""Stage 4: apply everything staged in ONE transaction and bump the index version.

A reader sees the old index or the new one, never a mix: removals, new chunks, vectors, postings
and BM25 statistics land together, and the HNSW graph is rebuilt after bulk loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chunkyard.retrieval.indexing.hnsw import check_storage, graph_settings
from chunkyard.retrieval.indexing.stage_reports import IndexingError, PublishReport, stage_timings
from chunkyard.retrieval.indexing.staging import check_owner
from chunkyard.retrieval.indexing.swap import POSTINGS_PREPARED
from chunkyard.retrieval.lexical.languages import published_config
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store, bm25, indexes, published
from chunkyard.retrieval.store import staging as staging_rows
from chunkyard.retrieval.store.indexes import next_name, partition_names, relation_exists
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
            report.chunks_total, report.documents_total = published.sizes(conn, index_name)
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
                    lambda: bm25.published_bm25(conn, index_name),
                )
            )
            bumped = published.republish_config(conn, index_name, config)
            staging_rows.clear_staging(conn, index_name)
            report.published = bumped is not None
            version = bumped if bumped is not None else version
            report.version = version
            report.chunks_total, report.documents_total = published.sizes(conn, index_name)
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

        # a large full build (the BM25 stage decided, and prepared its postings): new partitions beside
        # the live ones, swapped in at the end
        swapping = bool(report.staged.get(POSTINGS_PREPARED))
        if swapping and not report.full_rebuild:
            raise IndexingError(f"publish: {index_name!r} is no longer a full build; re-run stage_bm25")
        if swapping and not relation_exists(conn, next_name(parts["postings"])):
            raise IndexingError(
                f"publish: the postings stage_bm25 prepared for {index_name!r} are gone; re-run stage_bm25"
            )
        plan = published.PublishPlan(
            index_name=index_name,
            staged_rebuild=bool(full_rebuild),
            full_build=report.full_rebuild,
            staged_chunks=int(staged_chunks),
            dims=(old_dim, new_dim),
            # the published sizes, kept up to date by each publish (check_bm25_counts compares N with the
            # partition): an incremental publish adjusts them by what it removes and adds instead of scanning
            sizes=bm25.bm25_sizes(conn, index_name),
            swap=swapping,
            graph=graph_settings(storage),
            config=Jsonb(
                published_config(
                    spec.config.as_dict(),
                    report.staged,
                    lambda: bm25.published_bm25(conn, index_name),
                )
            ),
            config_hash=spec.config.config_hash,
            model_id=model_id,
        )
        applied = published.apply(conn, plan, lambda: tick(1, PUBLISH_PHASES))
        report.chunks_deleted, report.chunks_inserted = applied.deleted, applied.inserted
        if applied.hnsw_seconds is not None:
            report.hnsw_built, report.hnsw_seconds = True, applied.hnsw_seconds
        report.bm25_vocabulary = applied.stats.vocab_size
        report.version = applied.version
        report.published = True
        report.chunks_total = applied.stats.n_docs
        report.documents_total = applied.documents
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
        indexes.analyze(conn, partition)


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
        indexes.vacuum_analyze(conn, STAGING_TABLES)
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
        due = indexes.bloated(conn, [t for t in tables if t not in done], VACUUM_MIN_DEAD, VACUUM_DEAD_SHARE)
        # SKIP_LOCKED: a table another VACUUM (autovacuum's or a concurrent publish's) holds is left to it;
        # staging tables also get fresh planner statistics, as their sizes swing most
        for table in due:
            indexes.vacuum(conn, table, analyze=table in STAGING_TABLES)
    return due
