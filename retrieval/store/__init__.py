"""chunkyard's tables in one Postgres database: the pool and schema, with one room per thing stored."""

from __future__ import annotations

from chunkyard.retrieval.store import migrations
from chunkyard.retrieval.store.documents import Documents
from chunkyard.retrieval.store.indexes import EmbeddingCache, Evaluations, Indexes
from chunkyard.retrieval.store.keys import ApiKeys, AuditLog
from chunkyard.retrieval.store.pool import Pool


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
        with self.connection() as conn:
            if migrations.schema_current(conn):
                return []
        with self.connection() as conn, conn.transaction():
            return migrations.apply_migrations(conn)

    def schema_version(self) -> int:
        with self.connection() as conn:
            return migrations.schema_version(conn)


__all__ = ["Store"]
