"""Nearest published chunks by cosine in SQL: through an index's HNSW graph (pgvector) or by an exact scan.

Queries go to the index's own partition; the graph query orders by the expression its HNSW index
is built on (`embedding::vector(d)` or `embedding::halfvec(d)`), so the planner uses that graph.
Every function runs in the caller's connection (its read transaction); values are parameters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

# One nearest chunk: its id and its cosine distance to the query (float32 vectors).
Nearest = tuple[str, float]


def _where(filters: dict[str, Any] | None) -> sql.Composable:
    return sql.SQL(" WHERE metadata @> %(filters)s") if filters else sql.SQL("")


def graph_nearest(
    conn: psycopg.Connection,
    chunks_partition: str,
    dim: int,
    storage: str,
    query_vector: np.ndarray,
    fetch: int,
    filters: dict[str, Any] | None,
    *,
    ef_search: int,
    iterative_scan: str,
    max_scan_tuples: int,
) -> list[Nearest]:
    """At most `fetch` chunks in the order of the partition's graph (`storage(dim)`), with their exact
    distance, in one round trip with the scan's settings (`SET LOCAL`: the caller's transaction).

    `iterative_scan` is `hnsw.iterative_scan` (`off` sends neither it nor `hnsw.max_scan_tuples`).
    """
    exact_type = sql.SQL("vector({})").format(sql.Literal(dim))
    graph_type = sql.SQL("{}({})").format(sql.SQL(storage), sql.Literal(dim))
    params: dict[str, Any] = {"q": np.asarray(query_vector, dtype=np.float32), "n": fetch}
    if filters:
        params["filters"] = Jsonb(filters)
    query = sql.SQL(
        "SELECT chunk_id, (embedding::{e}) <=> %(q)s::{e} AS distance FROM {part}{where}"
        " ORDER BY (embedding::{g}) <=> %(q)s::{g} LIMIT %(n)s"
    ).format(e=exact_type, g=graph_type, part=sql.Identifier(chunks_partition), where=_where(filters))
    with conn.pipeline():  # one round trip for the settings and the query
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef_search)))
        if iterative_scan != "off":
            conn.execute(sql.SQL("SET LOCAL hnsw.iterative_scan = {}").format(sql.Literal(iterative_scan)))
            conn.execute(sql.SQL("SET LOCAL hnsw.max_scan_tuples = {}").format(sql.Literal(max_scan_tuples)))
        cursor = conn.execute(query, params)
    return cursor.fetchall()


def count_matching(conn: psycopg.Connection, chunks_partition: str, filters: dict[str, Any] | None) -> int:
    """How many chunks of the partition match `filters` (every chunk without)."""
    params: dict[str, Any] = {"filters": Jsonb(filters)} if filters else {}
    return conn.execute(
        sql.SQL("SELECT count(*) FROM {part}{where}").format(
            part=sql.Identifier(chunks_partition), where=_where(filters)
        ),
        params,
    ).fetchone()[0]


def exact_nearest(
    conn: psycopg.Connection,
    chunks_partition: str,
    dim: int,
    query_vector: np.ndarray,
    n: int,
    filters: dict[str, Any] | None,
) -> list[Nearest]:
    """The n nearest (matching) chunks and their distance by an exact scan of every vector, never the graph."""
    vector_type = sql.SQL("vector({})").format(sql.Literal(dim))
    params: dict[str, Any] = {"q": np.asarray(query_vector, dtype=np.float32), "n": n}
    if filters:
        params["filters"] = Jsonb(filters)
    exact = sql.SQL(
        "SELECT chunk_id, embedding <=> %(q)s::{t} AS distance FROM {part}{where} ORDER BY 2 LIMIT %(n)s"
    ).format(t=vector_type, part=sql.Identifier(chunks_partition), where=_where(filters))
    return conn.execute(exact, params).fetchall()
