"""Postgres + pgvector storage: documents, per-index chunk partitions, embedding cache, evaluations.

Every SQL identifier that is not a fixed table name (partitions, their indexes) is built with
`psycopg.sql.Identifier`; every value is a parameter.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from chunking.types import Document
from retrieval.analysis import analyzer_name, analyzer_names
from retrieval.capabilities import VectorFeatures, detect_features
from retrieval.db import connect, database_url, is_alive, revive_embedded
from retrieval.migrations import MIGRATIONS, STAGING_TABLES
from retrieval.names import IndexName

_MIGRATION_LOCK_KEY = 0x63686B79  # "chky": serialises concurrent migrate() calls


class RecordableReport(Protocol):
    """What `record_evaluation` stores: an `evaluation.runner.EvaluationReport` (named by shape,
    since the store sits below the evaluation package)."""

    dataset: str

    def as_dict(self) -> dict[str, Any]: ...


class StaleSignatures(RuntimeError):
    """Documents left unread as unchanged were deleted meanwhile: the folder must be read in full."""


@dataclass
class DocumentSync:
    """What `sync_documents` changed, by document id."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[Any] = field(default_factory=list)

    def as_metadata(self) -> dict[str, int]:
        return {
            "documents_added": len(self.added),
            "documents_changed": len(self.changed),
            "documents_deleted": len(self.deleted),
            "documents_unchanged": len(self.unchanged),
            "documents_failed": len(self.failed),
        }


def as_array(vector: Any) -> np.ndarray:
    """A pgvector value (pgvector.Vector or sequence) as a float32 numpy array."""
    if hasattr(vector, "to_numpy"):
        vector = vector.to_numpy()
    return np.asarray(vector, dtype=np.float32)


def partition_names(index_name: str) -> dict[str, str]:
    """Stable, short identifiers for an index's partitions and HNSW index (names can hold '/')."""
    digest = hashlib.sha256(index_name.encode("utf-8")).hexdigest()[:16]
    return {
        "chunks": f"chunks_{digest}",
        "postings": f"bm25_postings_{digest}",
        "hnsw": f"chunks_{digest}_hnsw",
    }


def split_index_name(index: str, default_collection: str = "demo") -> IndexName:
    """`collection/config` stays; a bare config name means the default collection."""
    return IndexName.parse(index, default_collection)


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
    """`Store.drop_index` inside the caller's transaction (alias snapshots drop with their last target)."""
    parts = partition_names(index_name)
    for part in (parts["chunks"], parts["postings"]):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(part)))
    for table in ("bm25_terms", "bm25_stats", "index_documents", *STAGING_TABLES):
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE index_name = %s").format(sql.Identifier(table)), (index_name,)
        )
    conn.execute("DELETE FROM indexes WHERE name = %s", (index_name,))


class Store:
    """chunkyard's tables in one Postgres database; a small thread-safe connection pool."""

    def __init__(self, url: str | None = None, *, pool_size: int = 4) -> None:
        self.url = url or database_url()
        self._pool: queue.LifoQueue[psycopg.Connection] = queue.LifoQueue()
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._features: VectorFeatures | None = None

    # -- connections -------------------------------------------------------------------------

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """An autocommit connection (use `with conn.transaction():` for atomic work).

        A pooled connection is handed out only while it is alive (see `retrieval.db.is_alive`), so
        after a database restart callers get fresh connections instead of the dead ones; a failed
        connect to this process's embedded server starts that server again and tries once more.
        """
        conn = self._pooled() or self._connect()
        try:
            yield conn
        except BaseException as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.close()  # its siblings in the pool saw the same outage
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
            raise
        finally:
            healthy = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if healthy and self._pool.qsize() < self._pool_size:
                self._pool.put(conn)
            elif not conn.closed:
                conn.close()

    def _pooled(self) -> psycopg.Connection | None:
        while True:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                return None
            if is_alive(conn):
                return conn
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _connect(self) -> psycopg.Connection:
        try:
            return connect(self.url, autocommit=True)
        except psycopg.OperationalError:
            if not revive_embedded(self.url):
                raise
        return connect(self.url, autocommit=True)

    def vector_features(self) -> VectorFeatures:
        """The server's Postgres and pgvector versions and what they allow (read once per Store)."""
        if self._features is None:
            with self.connection() as conn:
                self._features = detect_features(conn)
        return self._features

    def close(self) -> None:
        """Close the idle pooled connections (connections in use close when they come back)."""
        while True:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # -- schema ------------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply the migrations not yet applied (versioned, idempotent); return the versions applied.

        Every pipeline step calls this: a schema already current costs one read and no lock.
        """
        if self._schema_current():
            return []
        applied: list[int] = []
        with self.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, statements in MIGRATIONS:
                if version in done:
                    continue
                conn.execute(statements)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
                applied.append(version)
        return applied

    def _schema_current(self) -> bool:
        with self.connection() as conn:
            try:
                done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            except psycopg.errors.UndefinedTable:
                return False
        return all(version in done for version, _, _ in MIGRATIONS)

    def schema_version(self) -> int:
        with self.connection() as conn:
            row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        return int(row[0])

    # -- documents ---------------------------------------------------------------------------

    def sync_documents(
        self,
        collection: str,
        documents: Sequence[Document],
        failures: Sequence[Any] = (),
        *,
        unchanged: Sequence[str] = (),
        signatures: Mapping[str, str] | None = None,
    ) -> DocumentSync:
        """Make the stored collection equal `documents` plus `unchanged`: upsert added/changed, delete
        absent ones.

        A document that failed to load this time (its id or folder in `failures`) keeps its previous
        stored version instead of being deleted: a transient read error must not drop it.
        `unchanged` are ids left unread because their file signature matched (`document_signatures`);
        `signatures` ({id: file signature}) is recorded for the documents given, None where absent.
        An unchanged id that is no longer stored raises `StaleSignatures`: read the files again.
        """
        ids = [d.id for d in documents]
        if len(set(ids)) != len(ids):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"sync_documents: duplicate document id(s) {dupes[:5]}")
        failed_paths = [str(f.path).rstrip("/") for f in failures]
        report = DocumentSync(failed=list(failures))
        with self.connection() as conn, conn.transaction():
            # one sync of a collection at a time; an advisory lock, as row locks on every document
            # would write each row's xmax (a one-document update then dirties the whole collection)
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('chunkyard.documents:' || %s))", (collection,)
            )
            existing = {
                doc_id: (sha, signature)
                for doc_id, sha, signature in conn.execute(
                    "SELECT doc_id, sha256, file_signature FROM documents WHERE collection = %s",
                    (collection,),
                ).fetchall()
            }
            gone = [doc_id for doc_id in unchanged if doc_id not in existing]
            if gone:
                raise StaleSignatures(f"sync_documents: {len(gone)} unread document(s) are no longer stored")
            report.unchanged.extend(unchanged)
            upserts, resigned = [], []
            for doc in documents:
                sha = doc.sha256
                signature = signatures.get(doc.id) if signatures is not None else None
                if doc.id not in existing:
                    report.added.append(doc.id)
                elif existing[doc.id][0] != sha:
                    report.changed.append(doc.id)
                else:
                    report.unchanged.append(doc.id)
                    if signatures is not None and existing[doc.id][1] != signature:
                        resigned.append((signature, collection, doc.id))
                    continue
                upserts.append(
                    (
                        collection,
                        doc.id,
                        str(doc.metadata.get("path", doc.id)),
                        sha,
                        doc.text,
                        doc.mime_type,
                        doc.title,
                        Jsonb(doc.metadata),
                        signature,
                    )
                )
            given = set(ids).union(unchanged)

            def kept_by_failure(doc_id: str) -> bool:
                return any(doc_id == p or doc_id.startswith(p + "/") for p in failed_paths)

            report.deleted = sorted(d for d in existing if d not in given and not kept_by_failure(d))
            with conn.cursor() as cur:
                if upserts:
                    cur.executemany(
                        "INSERT INTO documents (collection, doc_id, path, sha256, text, mime_type, title,"
                        " metadata, file_signature) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                        " ON CONFLICT (collection, doc_id) DO UPDATE SET path = excluded.path,"
                        " sha256 = excluded.sha256, text = excluded.text, mime_type = excluded.mime_type,"
                        " title = excluded.title, metadata = excluded.metadata,"
                        " file_signature = excluded.file_signature, updated_at = now()",
                        upserts,
                    )
                if resigned:
                    cur.executemany(
                        "UPDATE documents SET file_signature = %s WHERE collection = %s AND doc_id = %s",
                        resigned,
                    )
            if report.deleted:
                conn.execute(
                    "DELETE FROM documents WHERE collection = %s AND doc_id = ANY(%s)",
                    (collection, report.deleted),
                )
            conn.execute("DELETE FROM document_failures WHERE collection = %s", (collection,))
            if failures:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO document_failures (collection, path, reason) VALUES (%s, %s, %s)"
                        " ON CONFLICT (collection, path) DO UPDATE SET reason = excluded.reason,"
                        " recorded_at = now()",
                        [(collection, str(f.path), str(f.reason)) for f in failures],
                    )
        return report

    def documents(self, collection: str, doc_ids: Iterable[str] | None = None) -> list[Document]:
        query = "SELECT doc_id, text, mime_type, title, metadata FROM documents WHERE collection = %s"
        params: list[Any] = [collection]
        if doc_ids is not None:
            query += " AND doc_id = ANY(%s)"
            params.append(list(doc_ids))
        with self.connection() as conn:
            rows = conn.execute(query + " ORDER BY doc_id", params).fetchall()
        return [Document(id=r[0], text=r[1], mime_type=r[2], title=r[3], metadata=r[4] or {}) for r in rows]

    def document_signatures(self, collection: str) -> dict[str, str]:
        """{document id: file signature} of the stored documents that have one (see `sync_documents`)."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT doc_id, file_signature FROM documents WHERE collection = %s AND file_signature IS NOT NULL",
                (collection,),
            ).fetchall()
        return dict(rows)

    def document_hashes(self, collection: str) -> dict[str, str]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT doc_id, sha256 FROM documents WHERE collection = %s", (collection,)
            ).fetchall()
        return dict(rows)

    def document_failures(self, collection: str) -> list[dict[str, str]]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT path, reason FROM document_failures WHERE collection = %s ORDER BY path",
                (collection,),
            ).fetchall()
        return [{"path": p, "reason": r} for p, r in rows]

    # -- indexes -----------------------------------------------------------------------------

    def ensure_index(self, spec: Any) -> dict[str, Any]:
        """Register an index (collection x config) and create its partitions if they do not exist."""
        name = spec.name
        parts = partition_names(name)
        info = self.index_info(name)
        if info is not None:  # registered: the partitions are checked, not created again (no DDL)
            with self.connection() as conn:
                exists = conn.execute(
                    "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                    (parts["chunks"], parts["postings"]),
                ).fetchone()[0]
            if exists:
                return info
        with self.connection() as conn, conn.transaction():
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
        info = self.index_info(name)
        assert info is not None
        return info

    def index_info(self, index_name: str) -> dict[str, Any] | None:
        """The index's config, version, sizes, BM25 stats and latest evaluation (None if unknown)."""
        with self.connection() as conn:
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
        info["latest_evaluation"] = self._latest_evaluation_record(index_name)
        return info

    def list_indexes(self) -> list[dict[str, Any]]:
        """Every index's `index_info`; none in a database no index was built in (no tables yet)."""
        with self.connection() as conn:
            try:
                names = [r[0] for r in conn.execute("SELECT name FROM indexes ORDER BY name")]
            except psycopg.errors.UndefinedTable:
                return []
        return [info for info in (self.index_info(n) for n in names) if info is not None]

    def index_version(self, index_name: str) -> int | None:
        with self.connection() as conn:
            row = conn.execute("SELECT version FROM indexes WHERE name = %s", (index_name,)).fetchone()
        return None if row is None else int(row[0])

    def drop_index(self, index_name: str) -> None:
        """Remove an index entirely: partitions, postings, stats, staging, bookkeeping."""
        with self.connection() as conn, conn.transaction():
            drop_index_in(conn, index_name)

    # -- embedding cache ---------------------------------------------------------------------

    def cached_embeddings(self, model_id: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Vectors already computed for these content hashes by this model (backend included)."""
        wanted = list(dict.fromkeys(hashes))
        found: dict[str, np.ndarray] = {}
        with self.connection() as conn, conn.cursor(binary=True) as cur:
            for i in range(0, len(wanted), 10000):
                rows = cur.execute(
                    "SELECT content_hash, embedding FROM embedding_cache"
                    " WHERE model_id = %s AND content_hash = ANY(%s)",
                    (model_id, wanted[i : i + 10000]),
                ).fetchall()
                for content_hash, vector in rows:
                    found[content_hash] = as_array(vector)
        return found

    def cache_embeddings(self, model_id: str, vectors: dict[str, np.ndarray]) -> int:
        """Add vectors to the cache (binary COPY into a temp table, then insert the new ones)."""
        if not vectors:
            return 0
        with self.connection() as conn, conn.transaction():
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

    # -- evaluations -------------------------------------------------------------------------

    def record_evaluation(self, index_name: str, report: RecordableReport) -> int:
        """Store the report's `as_dict()` (JSONB) against the index's current version."""
        with self.connection() as conn:
            row = conn.execute(
                "INSERT INTO evaluations (index_name, dataset, index_version, report)"
                " VALUES (%s, %s, (SELECT version FROM indexes WHERE name = %s), %s) RETURNING id",
                (index_name, report.dataset, index_name, Jsonb(report.as_dict())),
            ).fetchone()
        return int(row[0])

    def latest_evaluation(self, index_name: str) -> dict[str, Any] | None:
        """The dict the latest `record_evaluation` stored (None if never evaluated)."""
        record = self._latest_evaluation_record(index_name)
        return None if record is None else record["report"]

    def _latest_evaluation_record(self, index_name: str) -> dict[str, Any] | None:
        with self.connection() as conn:
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
