"""The index registry: indexes, their partitions and published state, evaluations, the embedding cache."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import psycopg
from chunkyard.retrieval.lexical.analysis import analyzer_name, analyzer_names
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store.migrations import PARTITIONED, STAGING_TABLES
from chunkyard.retrieval.store.pool import Pool
from chunkyard.retrieval.store.server import HNSW_MAX_DIMS
from chunkyard.retrieval.store.vectors import as_array
from psycopg import Connection, sql
from psycopg.types.json import Jsonb


# An index's chunk and postings partitions: their names, and creating and dropping them in SQL.
#
# Every SQL identifier that is not a fixed table name (partitions, their indexes) is built with
# `psycopg.sql.Identifier`; every value is a parameter.
def partition_names(index_name: str) -> dict[str, str]:
    """Stable, short identifiers for an index's partitions and HNSW index (names can hold '/')."""
    digest = hashlib.sha256(index_name.encode("utf-8")).hexdigest()[:16]
    return {
        "chunks": f"chunks_{digest}",
        "postings": f"bm25_postings_{digest}",
        "hnsw": f"chunks_{digest}_hnsw",
    }


def next_name(live: str) -> str:
    """The name a partition (or its index) has while a full build makes it beside the live one."""
    return f"{live}_next"


def drop_next_tables(conn: psycopg.Connection, index_name: str) -> None:
    """Drop the tables a full build makes beside the live partitions (a killed build's, or postings
    prepared for a swap that will not come)."""
    for part in (partition_names(index_name)["chunks"], partition_names(index_name)["postings"]):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(next_name(part))))


def create_next(conn: psycopg.Connection, index_name: str, kind: str) -> None:
    """An empty table LIKE the parent of the partition `kind`, under the partition's next name, with a
    CHECK of the partition bound (so attaching it scans nothing); a killed build's is dropped first."""
    parent = next(parent for parent, k, _ in PARTITIONED if k == kind)
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


def build_keys(conn: psycopg.Connection, index_name: str, kind: str, work_mem: str) -> None:
    """The primary key and B-trees of the loaded next table of `kind`, built by sort with `work_mem`."""
    live = partition_names(index_name)[kind]
    keys = next(keys for _, k, keys in PARTITIONED if k == kind)
    set_maintenance_work_mem(conn, work_mem)
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


def create_partitions(conn: psycopg.Connection, index_name: str) -> None:
    """The index's chunk and postings partitions (list partitions keyed on its name), if absent."""
    parts = partition_names(index_name)
    for parent, part in (("chunks", parts["chunks"]), ("bm25_postings", parts["postings"])):
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES IN ({})").format(
                sql.Identifier(part), sql.Identifier(parent), sql.Literal(index_name)
            )
        )


def drop_index_in(conn: psycopg.Connection, index_name: str) -> None:
    """`Indexes.drop` inside the caller's transaction (alias snapshots drop with their last target)."""
    parts = partition_names(index_name)
    drop_next_tables(conn, index_name)
    for part in (parts["chunks"], parts["postings"]):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(part)))
    for table in ("bm25_terms", "bm25_stats", "index_documents", *STAGING_TABLES):
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE index_name = %s").format(sql.Identifier(table)), (index_name,)
        )
    conn.execute("DELETE FROM indexes WHERE name = %s", (index_name,))


# Upkeep of an index's tables: its HNSW graph's DDL, planner statistics (ANALYZE) and VACUUM.


def set_maintenance_work_mem(conn: Connection, size: str) -> None:
    """The memory index builds of the caller's transaction may use (a Postgres size: `512MB`)."""
    conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(size)))


@dataclass(frozen=True)
class Graph:
    """How an index's HNSW graph is built: its storage (one of VECTOR_STORAGES, checked by the caller),
    `m`, `ef_construction` and the memory the build may use (`retrieval.indexing.hnsw.graph_settings`)."""

    storage: str
    m: int
    ef_construction: int
    work_mem: str


def has_graph(dim: int | None, storage: str = "vector") -> bool:
    """Whether pgvector can index vectors this wide in this storage (wider ones are searched exactly)."""
    return bool(dim) and int(dim) <= HNSW_MAX_DIMS[storage]


def create_graph(conn: Connection, table: str, name: str, dim: int, graph: Graph) -> None:
    """The HNSW index `name` on `table`'s embedding cast to `storage(dim)`, built as `graph` says with one
    parallel worker."""
    set_maintenance_work_mem(conn, graph.work_mem)
    conn.execute("SET LOCAL max_parallel_maintenance_workers = 1")
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw ((embedding::{}({})) {}) WITH (m = {}, ef_construction = {})"
        ).format(
            sql.Identifier(name),
            sql.Identifier(table),
            sql.SQL(graph.storage),  # one of VECTOR_STORAGES (checked by the caller)
            sql.Literal(int(dim)),
            sql.Identifier(f"{graph.storage}_cosine_ops"),
            sql.Literal(graph.m),
            sql.Literal(graph.ef_construction),
        )
    )


def relation_exists(conn: Connection, name: str) -> bool:
    """Whether a table or index of this name exists."""
    return conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None


def drop_graph(conn: Connection, name: str) -> None:
    """Drop the HNSW index `name` (it must exist)."""
    conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))


def analyze(conn: Connection, table: str) -> None:
    """Fresh planner statistics for `table`."""
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


def vacuum_analyze(conn: Connection, tables: Iterable[str]) -> None:
    """VACUUM (ANALYZE) each of `tables` (outside a transaction)."""
    for table in tables:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))


def bloated(conn: Connection, tables: Sequence[str], min_dead: int, dead_share: float) -> list[str]:
    """Those of `tables` whose dead rows reach `min_dead` and `dead_share` of their live rows (the counts
    of `pg_stat_user_tables`), sorted by name."""
    return [
        name
        for (name,) in conn.execute(
            "SELECT name FROM (SELECT t.name, to_regclass(quote_ident(t.name)) AS rel"
            " FROM unnest(%s::text[]) AS t(name)) r"
            " WHERE pg_stat_get_dead_tuples(r.rel) >= greatest(%s, %s * pg_stat_get_live_tuples(r.rel))"
            " ORDER BY name",
            (list(tables), min_dead, dead_share),
        ).fetchall()
    ]


def vacuum(conn: Connection, table: str, *, analyze: bool) -> None:
    """VACUUM `table`, leaving it to whoever holds it (SKIP_LOCKED); with `analyze`, also its statistics."""
    options = "SKIP_LOCKED, ANALYZE" if analyze else "SKIP_LOCKED"
    conn.execute(sql.SQL("VACUUM ({}) {}").format(sql.SQL(options), sql.Identifier(table)))


def upkeep(
    conn: Connection,
    index_name: str,
    *,
    analyzed: tuple[str, ...],
    vacuum_staging: bool,
    min_dead: int,
    dead_share: float,
) -> list[str]:
    """After a publish (outside a transaction): ANALYZE the index's partitions named in `analyzed` ("chunks",
    "postings"), VACUUM (ANALYZE) the staging tables if `vacuum_staging`, then VACUUM the other tables an
    update writes that are `bloated` (min_dead, dead_share), the staging tables among them with fresh
    statistics; returns the tables vacuumed."""
    parts = partition_names(index_name)
    for kind in analyzed:
        analyze(conn, parts[kind])
    vacuumed = list(STAGING_TABLES) if vacuum_staging else []
    vacuum_analyze(conn, vacuumed)
    written = [*STAGING_TABLES, parts["chunks"], parts["postings"], "bm25_terms", "bm25_stats"]
    written += ["index_documents", "indexes", "documents"]
    due = bloated(conn, [t for t in written if t not in vacuumed], min_dead, dead_share)
    for table in due:
        vacuum(conn, table, analyze=table in STAGING_TABLES)
    return [*vacuumed, *due]


# Registered indexes (collection x config): their partitions, versions, sizes and latest evaluation.
def split_index_name(index: str, default_collection: str = "demo") -> IndexName:
    """`collection/config` stays; a bare config name means the default collection."""
    return IndexName.parse(index, default_collection)


class Indexes:
    """The `indexes` table and each index's partitions."""

    def __init__(self, pool: Pool, evaluations: Evaluations) -> None:
        self._pool = pool
        self._evaluations = evaluations

    def ensure(self, spec: Any) -> dict[str, Any]:
        """Register an index (collection x config) and create its partitions if they do not exist."""
        name = spec.name
        parts = partition_names(name)
        info = self.info(name)
        if info is not None:  # registered: the partitions are checked, not created again (no DDL)
            with self._pool.connection() as conn:
                exists = conn.execute(
                    "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                    (parts["chunks"], parts["postings"]),
                ).fetchone()[0]
            if exists:
                return info
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO indexes (name, collection, config_name, config, config_hash, partition)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO NOTHING",
                (
                    name,
                    spec.collection,
                    spec.config.name,
                    Jsonb(spec.config.as_dict()),
                    spec.config.config_hash,
                    parts["chunks"],
                ),
            )
            create_partitions(conn, name)
        info = self.info(name)
        assert info is not None
        return info

    def info(self, index_name: str) -> dict[str, Any] | None:
        """The index's config, version, sizes, BM25 stats and latest evaluation (None if unknown)."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT i.name, i.collection, i.config_name, i.config, i.config_hash, i.partition,"
                " i.model_id, i.dim, i.version, i.published_at,"
                " s.n_docs, s.total_length, s.vocab_size,"
                " (SELECT count(*) FROM index_documents d WHERE d.index_name = i.name)"
                " FROM indexes i LEFT JOIN bm25_stats s ON s.index_name = i.name WHERE i.name = %s",
                (index_name,),
            ).fetchone()
        if row is None:
            return None
        info = {
            "name": row[0],
            "collection": row[1],
            "config_name": row[2],
            "config": row[3],
            "config_hash": row[4],
            "partition": row[5],
            "model_id": row[6],
            "dim": row[7],
            "version": row[8],
            "published_at": row[9].isoformat() if row[9] else None,
            "chunk_count": int(row[10] or 0),
            "bm25_total_length": int(row[11] or 0),
            "bm25_vocabulary": int(row[12] or 0),
            "document_count": int(row[13] or 0),
            # the BM25 analyzer queries use (`auto` as resolved at build), also in config.bm25
            "analyzer": analyzer_name((row[3] or {}).get("bm25")),
            # every analyzer its documents were analysed with (queries use all), and the detected
            # languages' text shares (`analyzer: auto`; empty for an explicit analyzer)
            "analyzers": analyzer_names((row[3] or {}).get("bm25")),
            "languages": dict(((row[3] or {}).get("bm25") or {}).get("languages") or {}),
        }
        info["latest_evaluation"] = self._evaluations.latest_record(index_name)
        return info

    def list(self) -> list[dict[str, Any]]:
        """Every index's `info`; none in a database no index was built in (no tables yet)."""
        with self._pool.connection() as conn:
            try:
                names = [r[0] for r in conn.execute("SELECT name FROM indexes ORDER BY name")]
            except psycopg.errors.UndefinedTable:
                return []
        return [info for info in (self.info(n) for n in names) if info is not None]

    def version(self, index_name: str) -> int | None:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT version FROM indexes WHERE name = %s", (index_name,)).fetchone()
        return None if row is None else int(row[0])

    def drop(self, index_name: str) -> None:
        """Remove an index entirely: partitions, postings, stats, staging, bookkeeping."""
        with self._pool.connection() as conn, conn.transaction():
            drop_index_in(conn, index_name)


# What readers ask of the `indexes` registry: an index's published state, which indexes exist or are published.
def queue_published_state(conn: psycopg.Connection, index_name: str) -> psycopg.Cursor[Any]:
    """Cursor of the index's (version, dim, config); no row when it is not registered (version 0:
    registered, never published)."""
    return conn.execute("SELECT version, dim, config FROM indexes WHERE name = %s", (index_name,))


def published_names(conn: psycopg.Connection) -> list[str]:
    """The names of the published indexes, sorted."""
    return [r[0] for r in conn.execute("SELECT name FROM indexes WHERE version > 0 ORDER BY name")]


def schema_and_published(conn: psycopg.Connection) -> tuple[int, int]:
    """The schema version and the number of published indexes.

    Raises `psycopg.errors.UndefinedTable` on a database nothing was migrated in.
    """
    version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
    published = conn.execute("SELECT count(*) FROM indexes WHERE version > 0").fetchone()[0]
    return int(version), int(published)


def registered(conn: psycopg.Connection, collection: str | None = None) -> list[tuple[str, str]]:
    """Every registered index's (name, collection), by name; only `collection`'s when given."""
    query = "SELECT name, collection FROM indexes"
    params: tuple[str, ...] = ()
    if collection is not None:
        query += " WHERE collection = %s"
        params = (collection,)
    return conn.execute(query + " ORDER BY name", params).fetchall()


# Evaluation reports stored against the index version they measured.
class RecordableReport(Protocol):
    """What `Evaluations.record` stores: an `evaluation.runner.EvaluationReport` (named by shape,
    since the store sits below the evaluation package)."""

    dataset: str

    def as_dict(self) -> dict[str, Any]: ...


class Evaluations:
    """The `evaluations` table: one JSONB report per evaluation run."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def record(self, index_name: str, report: RecordableReport) -> int:
        """Store the report's `as_dict()` (JSONB) against the index's current version."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO evaluations (index_name, dataset, index_version, report)"
                " VALUES (%s, %s, (SELECT version FROM indexes WHERE name = %s), %s) RETURNING id",
                (index_name, report.dataset, index_name, Jsonb(report.as_dict())),
            ).fetchone()
        return int(row[0])

    def latest(self, index_name: str) -> dict[str, Any] | None:
        """The dict the latest `record` stored (None if never evaluated)."""
        record = self.latest_record(index_name)
        return None if record is None else record["report"]

    def latest_record(self, index_name: str) -> dict[str, Any] | None:
        """The latest report with its dataset, index version and time (None if never evaluated)."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT dataset, index_version, report, created_at FROM evaluations"
                " WHERE index_name = %s ORDER BY created_at DESC, id DESC LIMIT 1",
                (index_name,),
            ).fetchone()
        if row is None:
            return None
        return {
            "dataset": row[0],
            "index_version": row[1],
            "report": row[2],
            "created_at": row[3].isoformat(),
        }


# Vectors already computed, by model and content hash, so unchanged text is never embedded twice.
class EmbeddingCache:
    """The `embedding_cache` table, keyed on (model id with its backend, content hash)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def lookup(self, model_id: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Vectors already computed for these content hashes by this model (backend included)."""
        wanted = list(dict.fromkeys(hashes))
        found: dict[str, np.ndarray] = {}
        with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
            for i in range(0, len(wanted), 10000):
                rows = cur.execute(
                    "SELECT content_hash, embedding FROM embedding_cache"
                    " WHERE model_id = %s AND content_hash = ANY(%s)",
                    (model_id, wanted[i : i + 10000]),
                ).fetchall()
                for content_hash, vector in rows:
                    found[content_hash] = as_array(vector)
        return found

    def add(self, model_id: str, vectors: dict[str, np.ndarray]) -> int:
        """Add vectors to the cache (binary COPY into a temp table, then insert the new ones)."""
        if not vectors:
            return 0
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS _cache_load (content_hash text, embedding vector)"
                " ON COMMIT DELETE ROWS"
            )
            with conn.cursor() as cur:
                with cur.copy(
                    "COPY _cache_load (content_hash, embedding) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["text", "vector"])
                    for content_hash, vector in vectors.items():
                        copy.write_row((content_hash, np.asarray(vector, dtype=np.float32)))
                cur.execute(
                    "INSERT INTO embedding_cache (model_id, content_hash, embedding)"
                    " SELECT %s, content_hash, embedding FROM _cache_load"
                    " ON CONFLICT (model_id, content_hash) DO NOTHING",
                    (model_id,),
                )
                return cur.rowcount
