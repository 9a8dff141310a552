"""Stage 4: apply everything staged in ONE transaction and bump the index version.

A reader sees the old index or the new one, never a mix: removals, new chunks, vectors, postings
and BM25 statistics land together, and the HNSW graph is rebuilt after bulk loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chunkyard.retrieval.indexing.hnsw import check_storage, create_hnsw, has_graph
from chunkyard.retrieval.indexing.stage_reports import IndexingError, PublishReport, stage_timings
from chunkyard.retrieval.indexing.staging import (
    check_owner,
    clear_staging,
    insert_staged_chunks,
    insert_staged_postings,
)
from chunkyard.retrieval.indexing.swap import POSTINGS_PREPARED, build_next, clear_staging_for_swap, swap_in
from chunkyard.retrieval.lexical.languages import published_config
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.bm25 import CorpusStats, refresh_stats
from chunkyard.retrieval.store.migrations import STAGING_TABLES
from chunkyard.retrieval.store.partitions import partition_names
from psycopg import Connection, sql
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
    chunks_t = sql.Identifier(parts["chunks"])
    features = store.vector_features()
    report = PublishReport(
        index=index_name,
        vector_storage=spec.config.vector_storage,
        postgres_version=features.postgres_version,
        pgvector_version=features.pgvector_version,
    )
    with store.connection() as conn, conn.transaction():
        row = conn.execute(
            "SELECT version, dim FROM indexes WHERE name = %s FOR UPDATE", (index_name,)
        ).fetchone()
        if row is None:
            raise IndexingError(f"publish: unknown index {index_name!r}; run stage_chunks first")
        version, old_dim = int(row[0]), row[1]
        run = conn.execute(
            "SELECT config_hash, full_rebuild, model_id, report FROM staged_runs WHERE index_name = %s",
            (index_name,),
        ).fetchone()
        check_owner("publish", index_name, owner, (run[3] or {}).get("owner") if run else None)
        if run is None:  # nothing staged: the published index is already current
            report.version = version
            report.chunks_total, report.documents_total = _sizes(conn, index_name, chunks_t)
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        config_hash, full_rebuild, model_id, staged_report = run
        report.full_rebuild = bool(full_rebuild or version == 0)
        report.staged = dict(staged_report or {})
        if config_hash != spec.config.config_hash:
            raise IndexingError(
                f"publish: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        staged_chunks, staged_removals = conn.execute(
            "SELECT (SELECT count(*) FROM staged_chunks WHERE index_name = %s),"
            " (SELECT count(*) FROM staged_removals WHERE index_name = %s)",
            (index_name, index_name),
        ).fetchone()
        if version > 0 and not full_rebuild and staged_chunks == 0 and staged_removals == 0:
            # nothing to index: keep the version (caches keyed on it stay valid), unless only the
            # retrieval options changed (hybrid, context_scoring: outside the config hash), which
            # are republished under a new version so every Searcher picks them up
            config = Jsonb(published_config(conn, index_name, spec.config.as_dict(), report.staged))
            bumped = conn.execute(
                "UPDATE indexes SET version = version + 1, published_at = now(), config = %s"
                " WHERE name = %s AND config IS DISTINCT FROM %s RETURNING version",
                (config, index_name, config),
            ).fetchone()
            clear_staging(conn, index_name)
            report.published = bumped is not None
            version = int(bumped[0]) if bumped else version
            report.version = version
            report.chunks_total, report.documents_total = _sizes(conn, index_name, chunks_t)
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        missing_vectors, missing_terms = conn.execute(
            "SELECT count(*) FILTER (WHERE e.chunk_id IS NULL), count(*) FILTER (WHERE l.chunk_id IS NULL)"
            " FROM staged_chunks s"
            " LEFT JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
            " LEFT JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
            " WHERE s.index_name = %s",
            (index_name,),
        ).fetchone()
        if missing_vectors:
            raise IndexingError(
                f"publish: {missing_vectors} staged chunks have no vector; run stage_embeddings"
            )
        if missing_terms:
            raise IndexingError(f"publish: {missing_terms} staged chunks have no BM25 terms; run stage_bm25")
        report.vectors_checked = _check_vectors(conn, index_name, model_id, report.staged)
        dims = conn.execute(
            "SELECT DISTINCT vector_dims(embedding) FROM staged_embeddings WHERE index_name = %s",
            (index_name,),
        ).fetchall()
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
        sizes = conn.execute(
            "SELECT n_docs, total_length FROM bm25_stats WHERE index_name = %s", (index_name,)
        ).fetchone()

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

        new_version = conn.execute(
            "UPDATE indexes SET version = version + 1, published_at = now(), config = %s, config_hash = %s,"
            " model_id = coalesce(%s, model_id), dim = %s WHERE name = %s RETURNING version",
            (
                Jsonb(published_config(conn, index_name, spec.config.as_dict(), report.staged)),
                spec.config.config_hash,
                model_id,
                new_dim,
                index_name,
            ),
        ).fetchone()[0]
        if swapping:
            clear_staging_for_swap(conn, index_name)
            swap_in(conn, index_name)  # last: its locks last only until the commit
        else:
            clear_staging(conn, index_name)
        report.version = int(new_version)
        report.published = True
        report.chunks_total = stats.n_docs
        report.documents_total = int(
            conn.execute(
                "SELECT count(*) FROM index_documents WHERE index_name = %s", (index_name,)
            ).fetchone()[0]
        )
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
    chunks_t, postings_t = sql.Identifier(parts["chunks"]), sql.Identifier(parts["postings"])
    old_dim, new_dim = dims

    # 1. removals: old chunks of changed, deleted (or, on a rebuild, all) documents, with their postings
    deleted, deleted_length = _remove_chunks(conn, index_name, chunks_t, postings_t, bool(full_rebuild))
    report.chunks_deleted = int(deleted)
    if full_rebuild:
        conn.execute("DELETE FROM index_documents WHERE index_name = %s", (index_name,))
    else:
        conn.execute(
            "DELETE FROM index_documents WHERE index_name = %s"
            " AND doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s)",
            (index_name, index_name),
        )

    # 2. HNSW: bulk loads drop the graph and rebuild it after the load (much faster than inserting)
    incremental = sizes is not None and not report.full_rebuild
    if incremental:
        remaining = int(sizes[0]) - report.chunks_deleted
    else:
        remaining = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(chunks_t)).fetchone()[0])
    incoming = int(staged_chunks)
    hnsw_exists = conn.execute("SELECT to_regclass(%s)", (parts["hnsw"],)).fetchone()[0] is not None
    if hnsw_exists and (incoming > remaining or new_dim != old_dim):
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(parts["hnsw"])))
        hnsw_exists = False

    # 3. new chunks with vectors and BM25 lengths, postings, document frequencies
    inserted_length = 0
    if incoming:  # a delete stages no chunk: nothing to insert
        inserted, inserted_length = insert_staged_chunks(conn, parts["chunks"], index_name)
        report.chunks_inserted = int(inserted)
        insert_staged_postings(conn, parts["postings"], index_name)
        conn.execute(
            "INSERT INTO bm25_terms (index_name, term, df)"
            " SELECT index_name, term, df FROM staged_bm25_terms WHERE index_name = %s"
            " ON CONFLICT (index_name, term) DO UPDATE SET df = bm25_terms.df + excluded.df",
            (index_name,),
        )
    conn.execute(
        "INSERT INTO index_documents (index_name, doc_id, sha256)"
        " SELECT index_name, doc_id, sha256 FROM staged_documents WHERE index_name = %s"
        " ON CONFLICT (index_name, doc_id) DO UPDATE SET sha256 = excluded.sha256",
        (index_name,),
    )
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
    checked, wrong, example = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE c.embedding IS DISTINCT FROM e.embedding),"
        " min(s.chunk_id) FILTER (WHERE c.embedding IS DISTINCT FROM e.embedding)"
        " FROM staged_chunks s JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
        " LEFT JOIN embedding_cache c ON c.model_id = %s AND c.content_hash = s.content_hash"
        " WHERE s.index_name = %s",
        (model_id, index_name),
    ).fetchone()
    if wrong:
        raise IndexingError(
            f"publish: {wrong} staged vector(s) of {index_name!r} are not the embedding of their chunk's "
            f"text (e.g. chunk {example!r}); nothing published, re-run the index's stages"
        )
    return int(checked)


def _remove_chunks(
    conn: Connection,
    index_name: str,
    chunks_t: sql.Identifier,
    postings_t: sql.Identifier,
    full_rebuild: bool,
) -> tuple[int, int]:
    """Delete the old chunks of changed and deleted documents (on a rebuild, all of them) with their
    postings and document frequencies; returns (chunks deleted, their total BM25 length)."""
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
        conn.execute("DELETE FROM bm25_terms WHERE index_name = %s", (index_name,))
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


def _analyze_partition(store: Store, partition: str, report: PublishReport) -> None:
    """Fresh planner statistics after big changes, so queries keep choosing the HNSW index.

    A change of under ANALYZE_SHARE of the partition's rows is left to autovacuum, whose analyze
    threshold (50 rows + 10 %) catches up with it: a one-document update skips a full ANALYZE.
    """
    changed = report.chunks_inserted + report.chunks_deleted
    if changed == 0 or changed < ANALYZE_SHARE * report.chunks_total:
        return
    with store.connection() as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(partition)))


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
        for table in STAGING_TABLES:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
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
        due = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM (SELECT t.name, to_regclass(quote_ident(t.name)) AS rel"
                " FROM unnest(%s::text[]) AS t(name)) r"
                " WHERE pg_stat_get_dead_tuples(r.rel) >= greatest(%s, %s * pg_stat_get_live_tuples(r.rel))"
                " ORDER BY name",
                ([t for t in tables if t not in done], VACUUM_MIN_DEAD, VACUUM_DEAD_SHARE),
            ).fetchall()
        ]
        # SKIP_LOCKED: a table another VACUUM (autovacuum's or a concurrent publish's) holds is left to it;
        # staging tables also get fresh planner statistics, as their sizes swing most
        for table in due:
            options = "SKIP_LOCKED, ANALYZE" if table in STAGING_TABLES else "SKIP_LOCKED"
            conn.execute(sql.SQL("VACUUM ({}) {}").format(sql.SQL(options), sql.Identifier(table)))
    return due


def _sizes(conn: Connection, index_name: str, chunks_t: sql.Identifier) -> tuple[int, int]:
    chunks = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(chunks_t)).fetchone()[0])
    docs = int(
        conn.execute("SELECT count(*) FROM index_documents WHERE index_name = %s", (index_name,)).fetchone()[
            0
        ]
    )
    return chunks, docs
