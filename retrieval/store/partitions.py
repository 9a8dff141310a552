"""An index's chunk and postings partitions: their names, and creating and dropping them in SQL.

Every SQL identifier that is not a fixed table name (partitions, their indexes) is built with
`psycopg.sql.Identifier`; every value is a parameter.
"""

from __future__ import annotations

import hashlib

import psycopg
from chunkyard.retrieval.store.migrations import STAGING_TABLES
from psycopg import sql


def partition_names(index_name: str) -> dict[str, str]:
    """Stable, short identifiers for an index's partitions and HNSW index (names can hold '/')."""
    digest = hashlib.sha256(index_name.encode("utf-8")).hexdigest()[:16]
    return {
        "chunks": f"chunks_{digest}",
        "postings": f"bm25_postings_{digest}",
        "hnsw": f"chunks_{digest}_hnsw",
    }


def next_name(live: str) -> str:
    """The name a partition (or its index) has while a full build makes it beside the live one."""
    return f"{live}_next"


def drop_next_tables(conn: psycopg.Connection, index_name: str) -> None:
    """Drop the tables a full build makes beside the live partitions (a killed build's, or postings
    prepared for a swap that will not come)."""
    for part in (partition_names(index_name)["chunks"], partition_names(index_name)["postings"]):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(next_name(part))))


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
    """`Indexes.drop` inside the caller's transaction (alias snapshots drop with their last target)."""
    parts = partition_names(index_name)
    drop_next_tables(conn, index_name)
    for part in (parts["chunks"], parts["postings"]):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(part)))
    for table in ("bm25_terms", "bm25_stats", "index_documents", *STAGING_TABLES):
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE index_name = %s").format(sql.Identifier(table)), (index_name,)
        )
    conn.execute("DELETE FROM indexes WHERE name = %s", (index_name,))
