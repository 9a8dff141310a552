"""The per-partition HNSW graph, built by publishing and by alias snapshots (one place for its settings)."""

from __future__ import annotations

import os
from typing import Any

from chunkyard.chunking.environment import env_int
from chunkyard.retrieval.indexing.stage_reports import IndexingError
from chunkyard.retrieval.store.indexes import Graph, create_graph, partition_names
from chunkyard.retrieval.store.server import VectorFeatureError, detect_features
from psycopg import Connection


def maintenance_work_mem() -> str:
    """The memory an index build may use (CHUNKYARD_MAINTENANCE_WORK_MEM, else 512MB)."""
    return os.environ.get("CHUNKYARD_MAINTENANCE_WORK_MEM", "512MB")


def vector_storage(config: dict[str, Any] | None) -> str:
    """An index config's (`IndexConfig.as_dict()`, as stored) HNSW storage type: vector or halfvec."""
    return str((config or {}).get("vector_storage") or "vector")


def graph_settings(storage: str = "vector") -> Graph:
    """How the graph is built in `storage`: m and ef_construction (CHUNKYARD_HNSW_M,
    CHUNKYARD_HNSW_EF_CONSTRUCTION, else 16 and 64) and `maintenance_work_mem()`."""
    return Graph(
        storage,
        env_int("CHUNKYARD_HNSW_M", 16),
        env_int("CHUNKYARD_HNSW_EF_CONSTRUCTION", 64),
        maintenance_work_mem(),
    )


def check_storage(conn: Connection, storage: str, where: str) -> None:
    """An IndexingError naming the option and the server's pgvector when it lacks `storage`."""
    try:
        detect_features(conn).require_storage(storage, where)
    except VectorFeatureError as exc:
        raise IndexingError(str(exc)) from None


def create_hnsw(
    conn: Connection,
    index_name: str,
    dim: int,
    storage: str = "vector",
    *,
    table: str | None = None,
    name: str | None = None,
) -> None:
    """The per-partition HNSW graph on the vector cast to the index's dimension and storage type
    (`vector` or `halfvec`, the same expression dense search orders by; caller's transaction).

    `table` and `name` build it on a partition being prepared beside the live one (`indexing.swap`).
    """
    check_storage(conn, storage, f"{index_name}: vector_storage")
    parts = partition_names(index_name)
    create_graph(conn, table or parts["chunks"], name or parts["hnsw"], int(dim), graph_settings(storage))
