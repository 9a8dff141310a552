"""Dense candidates: query embedding, then the index's HNSW graph (pgvector) with an exact fallback.

Dense queries go to the index's own partition and order by the expression its HNSW index is built
on (`embedding::vector(d)` or `embedding::halfvec(d)`), so the planner uses that graph
(`retrieval.store.published_chunks` holds the SQL).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import psycopg
from chunkyard.chunking.environment import env_int
from chunkyard.retrieval.observability.telemetry import span
from chunkyard.retrieval.query.fusion import Candidates
from chunkyard.retrieval.query.handles import IndexHandle
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import HNSW_MAX_EF
from chunkyard.retrieval.store import published_chunks
from chunkyard.retrieval.store.server import VECTOR_STORAGES, VectorFeatures

# Iterative HNSW scans (pgvector 0.8): strict_order keeps rows in distance order; relaxed_order may
# return them slightly out of order (re-sorted here); off is the pre-0.8 behaviour.
ITERATIVE_SCAN_ENV = "CHUNKYARD_HNSW_ITERATIVE_SCAN"
ITERATIVE_SCAN_MODES = ("strict_order", "relaxed_order", "off")
# How many tuples one iterative scan may visit before it gives up (pgvector's default); the exact
# scan answers what it leaves short.
MAX_SCAN_TUPLES_ENV = "CHUNKYARD_HNSW_MAX_SCAN_TUPLES"
MAX_SCAN_TUPLES = 20000
# A `halfvec` graph's candidates re-ranked by the float32 cosine, per result asked for.
HALFVEC_RERANK = 4
# Up to this many chunks, an unfiltered dense query scans every vector exactly instead of the graph:
# with vectors inline (migration 7) the exact scan of 3,114 chunks takes 1.3 ms against the graph's
# 0.6 ms at ef_search 100, and it returns the true nearest (hybrid recall@5 on chroma_general
# 0.9237 exact vs 0.9227 by the graph). 0: always the graph.
EXACT_MAX_CHUNKS_ENV = "CHUNKYARD_EXACT_SEARCH_MAX_CHUNKS"
EXACT_MAX_CHUNKS = 5000


@runtime_checkable
class QueryEmbedder(Protocol):
    """What the Searcher needs of an embedder (`retrieval.embedders.embedder.Embedder` is one)."""

    def embed(self, texts: list[str], role: str = "document") -> np.ndarray: ...


def checked_vectors(given: np.ndarray, handle: IndexHandle, n_queries: int) -> np.ndarray:
    """Query vectors the caller computed (one row per query, the index's model), shape-checked."""
    vectors = np.asarray(given, dtype=np.float32)
    if vectors.shape != (n_queries, handle.dim):
        raise SearchError(
            f"query_vectors: expected shape ({n_queries}, {handle.dim}) for index "
            f"{handle.name!r}, got {vectors.shape}"
        )
    return vectors


def embed_queries(
    embedder: QueryEmbedder, handle: IndexHandle, queries: Sequence[str]
) -> tuple[np.ndarray, float]:
    """One vector per query in one embedding call, and the embedding time per query (ms)."""
    started = time.perf_counter()
    with span("search.embed_query", index=str(handle.name), queries=len(queries)):
        vectors = np.asarray(embedder.embed(list(queries), role="query"))
    embed_ms = (time.perf_counter() - started) * 1000 / len(queries)
    if vectors.shape[1] != handle.dim:
        raise SearchError(
            f"index {handle.name!r} holds {handle.dim}-dim vectors but the query embedder gives "
            f"{vectors.shape[1]}"
        )
    return vectors, embed_ms


def iterative_scan_mode(features: VectorFeatures | None) -> str:
    """`hnsw.iterative_scan` for this server: CHUNKYARD_HNSW_ITERATIVE_SCAN (strict_order, the default;
    relaxed_order; off), and always `off` where pgvector is older than 0.8 (no iterative scans)."""
    mode = os.environ.get(ITERATIVE_SCAN_ENV, "").strip() or "strict_order"
    if mode not in ITERATIVE_SCAN_MODES:
        raise SearchError(f"{ITERATIVE_SCAN_ENV}: expected one of {list(ITERATIVE_SCAN_MODES)}, got {mode!r}")
    return mode if features is not None and features.iterative_scan else "off"


def index_candidates(
    conn: psycopg.Connection,
    handle: IndexHandle,
    query_vector: np.ndarray,
    n: int,
    filters: dict[str, Any] | None,
    ef_search: int,
    iterative_scan: str = "off",
) -> Candidates:
    """The HNSW path alone: at most n nearest chunks by cosine, in one round trip with its settings.

    It orders by the expression the partition's graph is built on (`vector(d)` or `halfvec(d)`);
    the scores are the float32 cosine either way, and rows come back in that order (a halfvec
    graph's nearest HALFVEC_RERANK x n are re-ranked by it). With an
    iterative scan (pgvector 0.8) a selective filter keeps the scan going until n rows match or
    `hnsw.max_scan_tuples` is spent.
    """
    ef = min(HNSW_MAX_EF, max(ef_search, n))
    storage = _storage(handle)
    # a float16 graph ranks near-ties slightly differently: fetch up to HALFVEC_RERANK x n of its
    # nearest (within ef) and keep the n best by the float32 cosine
    fetch = n if handle.vector_storage == "vector" else max(n, min(ef, HALFVEC_RERANK * n))
    max_scan_tuples = env_int(MAX_SCAN_TUPLES_ENV, MAX_SCAN_TUPLES) if iterative_scan != "off" else 0
    rows = published_chunks.graph_nearest(
        conn,
        handle.chunks,
        handle.dim,
        storage,
        query_vector,
        fetch,
        filters,
        ef_search=ef,
        iterative_scan=iterative_scan,
        max_scan_tuples=max_scan_tuples,
    )
    if handle.vector_storage != "vector" or iterative_scan == "relaxed_order":
        rows.sort(key=lambda row: row[1])  # float16 graph order, or relaxed order: sort by the exact cosine
    return [(cid, 1.0 - float(distance)) for cid, distance in rows[:n]]


def dense_candidates(
    conn: psycopg.Connection,
    handle: IndexHandle,
    query_vector: np.ndarray,
    n: int,
    filters: dict[str, Any] | None,
    ef_search: int,
    features: VectorFeatures | None = None,
) -> Candidates:
    """Nearest chunks by cosine via the partition's HNSW index; exact scan if a filter starves it,
    and for an index of at most EXACT_MAX_CHUNKS chunks.

    `features` (the server's, `Store.vector_features`) turns on iterative index scans where pgvector
    has them (0.8+) for filtered queries; without them (or when `hnsw.max_scan_tuples` runs out) the
    exact scan below answers.
    """
    if not filters and 0 < handle.chunks_total <= env_int(EXACT_MAX_CHUNKS_ENV, EXACT_MAX_CHUNKS, minimum=0):
        return exact_candidates(conn, handle, query_vector, n, None)
    ef = min(HNSW_MAX_EF, max(ef_search, n))
    iterative = iterative_scan_mode(features) if filters or n > ef else "off"
    found = index_candidates(conn, handle, query_vector, n, filters, ef_search, iterative)
    if len(found) >= n:
        return found
    # HNSW's candidate list can run dry (a selective filter, or n > ef): count what exists and
    # fall back to an exact scan so k rows come back whenever k rows match.
    available = published_chunks.count_matching(conn, handle.chunks, filters)
    if available <= len(found):
        return found
    return exact_candidates(conn, handle, query_vector, n, filters)


def exact_candidates(
    conn: psycopg.Connection,
    handle: IndexHandle,
    query_vector: np.ndarray,
    n: int,
    filters: dict[str, Any] | None,
) -> Candidates:
    """The n nearest chunks by an exact scan of every (matching) vector, never the graph."""
    rows = published_chunks.exact_nearest(conn, handle.chunks, handle.dim, query_vector, n, filters)
    return [(cid, 1.0 - float(distance)) for cid, distance in rows]


def _storage(handle: IndexHandle) -> str:
    if handle.vector_storage not in VECTOR_STORAGES:
        raise SearchError(f"index {handle.name!r}: unknown vector_storage {handle.vector_storage!r}")
    return handle.vector_storage
