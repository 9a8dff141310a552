"""chunkyard's tables in one Postgres database: the pool and schema, with one room per thing stored."""

from __future__ import annotations

import psycopg
from chunkyard.retrieval.store.audit import AuditLog
from chunkyard.retrieval.store.documents import Documents
from chunkyard.retrieval.store.embedding_cache import EmbeddingCache
from chunkyard.retrieval.store.evaluations import Evaluations
from chunkyard.retrieval.store.indexes import Indexes
from chunkyard.retrieval.store.keys import ApiKeys
from chunkyard.retrieval.store.migrations import MIGRATIONS
from chunkyard.retrieval.store.pool import Pool

_MIGRATION_LOCK_KEY = 0x63686B79  # "chky": serialises concurrent migrate() calls


class Store(Pool):
    """The database: its connection pool and schema, and its rooms sharing that pool.

    `store.documents` (a collection's source documents), `store.indexes` (registered indexes and
    their partitions), `store.embedding_cache` (vectors by content hash) and `store.evaluations`
    (evaluation reports), `store.keys` (API keys, hashed) and `store.audit` (admin actions).
    """

    def __init__(self, url: str | None = None, *, pool_size: int = 4) -> None:
        super().__init__(url, pool_size=pool_size)
        self.documents = Documents(self)
        self.evaluations = Evaluations(self)
        self.indexes = Indexes(self, self.evaluations)
        self.embedding_cache = EmbeddingCache(self)
        self.keys = ApiKeys(self)
        self.audit = AuditLog(self)

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


__all__ = ["Store"]
