"""The per-partition HNSW graph, built by publishing and by alias snapshots (one place for its settings)."""

from __future__ import annotations

import os

from psycopg import Connection, sql

from chunking.environment import env_int
from retrieval.store import partition_names

HNSW_MAX_DIM = 2000  # pgvector's limit for an HNSW index on `vector`


def _maintenance_work_mem() -> str:
    return os.environ.get("CHUNKYARD_MAINTENANCE_WORK_MEM", "512MB")


def create_hnsw(conn: Connection, index_name: str, dim: int) -> None:
    """The per-partition HNSW graph on the vector cast to the index's dimension (caller's transaction)."""
    parts = partition_names(index_name)
    conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(_maintenance_work_mem())))
    conn.execute("SET LOCAL max_parallel_maintenance_workers = 1")
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw ((embedding::vector({})) vector_cosine_ops)"
            " WITH (m = {}, ef_construction = {})"
        ).format(
            sql.Identifier(parts["hnsw"]),
            sql.Identifier(parts["chunks"]),
            sql.Literal(int(dim)),
            sql.Literal(env_int("CHUNKYARD_HNSW_M", 16)),
            sql.Literal(env_int("CHUNKYARD_HNSW_EF_CONSTRUCTION", 64)),
        )
    )
