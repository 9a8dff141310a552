"""Stage 4: apply everything staged in ONE transaction and bump the index version.

A reader sees the old index or the new one, never a mix: removals, new chunks, vectors, postings
and BM25 statistics land together, and the HNSW graph is rebuilt after bulk loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chunkyard.retrieval.indexing.hnsw import graph_settings
from chunkyard.retrieval.indexing.stage_reports import IndexingError, PublishReport, stage_timings
from chunkyard.retrieval.indexing.staging import check_owner
from chunkyard.retrieval.indexing.swap import POSTINGS_PREPARED
from chunkyard.retrieval.lexical.languages import published_config
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store, indexes, published
from chunkyard.retrieval.store.publish_reads import read_for_publish
from chunkyard.retrieval.store.server import VectorFeatureError
from chunkyard.retrieval.store.staged_rows import StagedRun
from psycopg.types.json import Jsonb

# UPKEEP after a publish, one store call (`indexes.upkeep`), each measure measured:
# - ANALYZE the partitions after big changes, so queries keep choosing the HNSW index. A change of under
#   ANALYZE_SHARE of the partition's rows is left to autovacuum, whose analyze threshold (50 rows + 10 %)
#   catches up with it: a one-document update skips a full ANALYZE.
# - VACUUM (ANALYZE) the staging tables after a bulk publish of VACUUM_STAGING_CHUNKS: emptying them leaves
#   the bulk's rows dead, and until autovacuum comes round every later update scans their pages and is
#   planned for the bulk's row counts. On the 1,000-document collection (ONNX int8) one changed document
#   then cost 83-87 ms besides the model call, against 69-75 ms after this VACUUM (itself 25-45 ms).
# - VACUUM the tables an update writes whose dead rows reached VACUUM_MIN_DEAD and VACUUM_DEAD_SHARE of
#   their live rows (`pg_stat_user_tables`, which lags the last second). Autovacuum first looks at a
#   database a minute (`autovacuum_naptime`) after the server starts, and the embedded server stops with
#   the `chunkyard` process that started it: short processes (cron, a CLI per change) never get one. After
#   150 such updates of the 1,000-document collection (about 20k dead rows each in `staged_bm25` and the
#   postings partition) the publish step took 28-33 ms before a VACUUM and 20-26 ms after. Where
#   autovacuum runs, it keeps dead rows under its own lower threshold and this finds nothing to do.
#   VACUUM uses SKIP_LOCKED: a table another VACUUM holds is left to it.
ANALYZE_SHARE = 0.1  # a publish changing at least this share of a partition's rows re-analyzes it
VACUUM_STAGING_CHUNKS = 1000  # a publish of at least this many chunks vacuums the staging tables
# any table an update writes is vacuumed once its dead rows reach this many and this share of its live
# rows (autovacuum's own default share)
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
    applied, every staged vector must equal the cached embedding of its chunk's text (`_cached_model`).
    The store reads what this judges in one call (`read_for_publish`) and writes it in one (`apply`).
    """
    started = time.perf_counter()
    tick = progress or _no_progress  # the phases done, of PUBLISH_PHASES
    index_name, storage = spec.name, spec.config.vector_storage
    features = store.vector_features()
    report = PublishReport(
        index=index_name,
        vector_storage=storage,
        postgres_version=features.postgres_version,
        pgvector_version=features.pgvector_version,
    )
    with store.connection() as conn, conn.transaction():
        read = read_for_publish(conn, index_name, _cached_model)
        if read is None:
            raise IndexingError(f"publish: unknown index {index_name!r}; run stage_chunks first")
        staged = read.staged
        check_owner("publish", index_name, owner, staged.run.owner if staged else None)
        if staged is None:  # nothing staged: the published index is already current
            report.version = read.version
            report.chunks_total, report.documents_total = read.sizes or (0, 0)
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        run, old_dim = staged.run, read.dim
        report.full_rebuild = bool(run.full_rebuild or read.version == 0)
        report.staged = dict(run.report)
        if run.config_hash != spec.config.config_hash:
            raise IndexingError(
                f"publish: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        # the published index's config as it will be stored, with its resolved analyzers
        config = Jsonb(published_config(spec.config.as_dict(), report.staged, lambda: read.published_bm25))
        if read.version > 0 and not run.full_rebuild and staged.chunks == 0 and staged.removals == 0:
            # nothing to index: keep the version (caches keyed on it stay valid), unless only the
            # retrieval options changed (hybrid, context_scoring: outside the config hash), which
            # are republished under a new version so every Searcher picks them up
            bumped, sizes = published.republish(conn, index_name, config)
            report.published = bumped is not None
            report.version = bumped if bumped is not None else read.version
            report.chunks_total, report.documents_total = sizes
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        if staged.missing_vectors:
            raise IndexingError(
                f"publish: {staged.missing_vectors} staged chunks have no vector; run stage_embeddings"
            )
        if staged.missing_terms:
            raise IndexingError(
                f"publish: {staged.missing_terms} staged chunks have no BM25 terms; run stage_bm25"
            )
        if staged.vectors is not None and staged.vectors.wrong:
            raise IndexingError(
                f"publish: {staged.vectors.wrong} staged vector(s) of {index_name!r} are not the embedding of "
                f"their chunk's text (e.g. chunk {staged.vectors.example!r}); nothing published, re-run the "
                "index's stages"
            )
        report.vectors_checked = staged.vectors.checked if staged.vectors is not None else 0
        if len(staged.dims) > 1:
            raise IndexingError(
                f"publish: staged vectors of {index_name!r} have mixed dimensions {list(staged.dims)}"
            )
        new_dim = staged.dims[0] if staged.dims else old_dim
        if old_dim and new_dim != old_dim and not run.full_rebuild:
            raise IndexingError(
                f"publish: staged vectors have {new_dim} dims but {index_name!r} has {old_dim}; re-run stage_chunks"
            )
        try:  # before any change: an old pgvector has no halfvec
            features.require_storage(
                storage, f"publish {index_name!r}: indexes.{spec.config.name}.vector_storage"
            )
        except VectorFeatureError as exc:
            raise IndexingError(str(exc)) from None

        # a large full build (the BM25 stage decided, and prepared its postings): new partitions beside
        # the live ones, swapped in at the end
        swapping = bool(report.staged.get(POSTINGS_PREPARED))
        if swapping and not report.full_rebuild:
            raise IndexingError(f"publish: {index_name!r} is no longer a full build; re-run stage_bm25")
        if swapping and not staged.postings_prepared:
            raise IndexingError(
                f"publish: the postings stage_bm25 prepared for {index_name!r} are gone; re-run stage_bm25"
            )
        plan = published.PublishPlan(
            index_name=index_name,
            staged_rebuild=bool(run.full_rebuild),
            full_build=report.full_rebuild,
            staged_chunks=staged.chunks,
            dims=(old_dim, new_dim),
            # the published sizes, kept up to date by each publish (check_bm25_counts compares N with the
            # partition): an incremental publish adjusts them by what it removes and adds instead of scanning
            sizes=read.bm25_sizes,
            swap=swapping,
            graph=graph_settings(storage),
            config=config,
            config_hash=spec.config.config_hash,
            model_id=run.model_id,
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
    # UPKEEP: the partitions analyzed after a big change (a swap's postings were analyzed before they
    # were attached), the staging vacuumed after a bulk publish, bloated tables vacuumed
    changed = report.chunks_inserted + report.chunks_deleted
    analyzed = ("chunks", "postings") if not swapping else ("chunks",)
    with store.connection() as conn:
        vacuumed = indexes.upkeep(
            conn,
            index_name,
            analyzed=analyzed if changed and changed >= ANALYZE_SHARE * report.chunks_total else (),
            vacuum_staging=changed >= VACUUM_STAGING_CHUNKS,
            min_dead=VACUUM_MIN_DEAD,
            dead_share=VACUUM_DEAD_SHARE,
        )
    report.tables_vacuumed = len(vacuumed)
    tick(PUBLISH_PHASES, PUBLISH_PHASES)
    report.seconds = round(time.perf_counter() - started, 3)
    report.timings = stage_timings(report.staged, report.seconds, report.hnsw_seconds)
    return report


def _no_progress(done: int, total: int) -> None:
    pass


def _cached_model(run: StagedRun) -> str | None:
    """The model whose cached embeddings the run's staged vectors must equal: each is the model's embedding
    of its own chunk's text, equal to the cache's vector for the chunk's content hash (the embeddings stage
    caches every vector it computes).

    A mismatch means two runs' stages crossed (text of one, vector of the other): publishing it would serve
    a vector for text it does not embed, for as long as the document stays unchanged. Vectors computed
    while chunking (late chunking: in the context of the whole document) have no cache entry: None, they
    are not compared.
    """
    if run.model_id is None or int(run.report.get("chunks_precomputed_embeddings") or 0) > 0:
        return None
    return run.model_id
