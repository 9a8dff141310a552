"""Dense candidates: query embedding, then the index's HNSW graph (pgvector) with an exact fallback.

Dense queries go to the index's own partition and order by the expression its HNSW index is built
on, so the planner uses that graph.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from retrieval.options import HNSW_MAX_EF, SearchError
from retrieval.query.fusion import Candidates
from retrieval.query.snapshot import IndexHandle


@runtime_checkable
class QueryEmbedder(Protocol):
    """What the Searcher needs of an embedder (`retrieval.embedder.Embedder` is one)."""

    def embed(self, texts: list[str]) -> np.ndarray: ...


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
    vectors = np.asarray(embedder.embed(list(queries)))
    embed_ms = (time.perf_counter() - started) * 1000 / len(queries)
    if vectors.shape[1] != handle.dim:
        raise SearchError(
            f"index {handle.name!r} holds {handle.dim}-dim vectors but the query embedder gives "
            f"{vectors.shape[1]}"
        )
    return vectors, embed_ms


def dense_candidates(
    conn: psycopg.Connection,
    handle: IndexHandle,
    query_vector: np.ndarray,
    n: int,
    filters: dict[str, Any] | None,
    ef_search: int,
) -> Candidates:
    """Nearest chunks by cosine via the partition's HNSW index; exact scan if a filter starves it."""
    ef = min(HNSW_MAX_EF, max(ef_search, n))
    vector_type = sql.SQL("vector({})").format(sql.Literal(handle.dim))
    where = sql.SQL(" WHERE metadata @> %(filters)s") if filters else sql.SQL("")
    params: dict[str, Any] = {"q": np.asarray(query_vector, dtype=np.float32), "n": n}
    if filters:
        params["filters"] = Jsonb(filters)
    query = sql.SQL(
        "SELECT chunk_id, (embedding::{t}) <=> %(q)s::{t} AS distance FROM {part}{where}"
        " ORDER BY (embedding::{t}) <=> %(q)s::{t} LIMIT %(n)s"
    ).format(t=vector_type, part=sql.Identifier(handle.chunks), where=where)
    with conn.pipeline():  # one round trip for the setting and the query
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)))
        cursor = conn.execute(query, params)
    rows = cursor.fetchall()
    if len(rows) < n:
        # HNSW's candidate list can run dry (a selective filter, or n > ef): count what exists and
        # fall back to an exact scan so k rows come back whenever k rows match.
        available = conn.execute(
            sql.SQL("SELECT count(*) FROM {part}{where}").format(
                part=sql.Identifier(handle.chunks), where=where
            ),
            params,
        ).fetchone()[0]
        if available > len(rows):
            exact = sql.SQL(
                "SELECT chunk_id, embedding <=> %(q)s::{t} AS distance FROM {part}{where} ORDER BY 2 LIMIT %(n)s"
            ).format(t=vector_type, part=sql.Identifier(handle.chunks), where=where)
            rows = conn.execute(exact, params).fetchall()
    return [(cid, 1.0 - float(distance)) for cid, distance in rows]
