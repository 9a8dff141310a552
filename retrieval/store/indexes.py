"""Registered indexes (collection x config): their partitions, versions, sizes and latest evaluation."""

from __future__ import annotations

from typing import Any

import psycopg
from chunkyard.retrieval.lexical.analysis import analyzer_name, analyzer_names
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store.evaluations import Evaluations
from chunkyard.retrieval.store.partitions import create_partitions, drop_index_in, partition_names
from chunkyard.retrieval.store.pool import Pool
from psycopg.types.json import Jsonb


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
