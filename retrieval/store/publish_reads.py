"""What a publish reads before it writes, as one call under the index's row lock (the publish stage judges it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chunkyard.retrieval.store import bm25, published
from chunkyard.retrieval.store import staging as staging_rows
from chunkyard.retrieval.store.indexes import next_name, partition_names, relation_exists
from chunkyard.retrieval.store.staged_rows import StagedRun, VectorCheck
from psycopg import Connection


@dataclass(frozen=True)
class Staged:
    """The index's staged run and what the publish checks of it: the staged chunks and removals, the
    chunks missing a vector or BM25 terms, the distinct vector dimensions, the vectors compared with
    the embedding cache (None: not compared) and whether postings were prepared for a swap."""

    run: StagedRun
    chunks: int
    removals: int
    missing_vectors: int
    missing_terms: int
    dims: tuple[int, ...]
    vectors: VectorCheck | None
    postings_prepared: bool


@dataclass(frozen=True)
class PublishReads:
    """The published index under its row lock (version, dimension, BM25 sizes and settings) and its
    staging (None: nothing staged; then `sizes` holds the published (chunks, documents))."""

    version: int
    dim: int | None
    staged: Staged | None
    bm25_sizes: tuple[int, int] | None
    published_bm25: dict[str, Any] | None
    sizes: tuple[int, int] | None = None


def read_for_publish(
    conn: Connection, index_name: str, cached_model: Callable[[StagedRun], str | None]
) -> PublishReads | None:
    """Lock the index's `indexes` row until the transaction ends and read what the publish judges; None: no
    such index. `cached_model(run)` names the model whose cached embeddings the staged vectors must equal
    (None: they are not compared)."""
    locked = published.lock_version(conn, index_name)
    if locked is None:
        return None
    version, dim = locked
    run = staging_rows.read_staged_run(conn, index_name)
    if run is not None:
        chunks, removals = staging_rows.staged_counts(conn, index_name)
        missing_vectors, missing_terms = staging_rows.missing_vectors_and_terms(conn, index_name)
        model_id = cached_model(run)
        vectors = None if model_id is None else staging_rows.compare_with_cache(conn, index_name, model_id)
        dims = tuple(int(row[0]) for row in staging_rows.staged_dims(conn, index_name))
        sizes, settings = bm25.bm25_sizes(conn, index_name), bm25.published_bm25(conn, index_name)
        prepared = relation_exists(conn, next_name(partition_names(index_name)["postings"]))
        staged = Staged(run, chunks, removals, missing_vectors, missing_terms, dims, vectors, prepared)
        return PublishReads(version, dim, staged, sizes, settings)
    return PublishReads(version, dim, None, None, None, published.sizes(conn, index_name))
