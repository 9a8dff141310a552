"""An index's published rows written from its staging: the `indexes` row's version, chunks and postings
partitions, BM25 document frequencies and the documents it was built from (`index_documents`).

Every function runs on the caller's connection and inside its transaction: publish and stage_chunks
(`retrieval.indexing`) keep their transactions and locks, the statements live here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chunkyard.retrieval.store.migrations import (
    CHUNK_COLUMNS,
    INDEX_DOCUMENT_COLUMNS,
    POSTING_COLUMNS,
    STAGED_CHUNK_COLUMNS,
    TERM_COLUMNS,
    column_names,
)
from psycopg import Connection, sql
from psycopg.types.json import Jsonb


def _listed(columns: Sequence[str], prefix: str | None = None) -> sql.Composed:
    """`columns` as a statement's column list, each qualified by the table alias `prefix` if given."""
    if prefix is None:
        return sql.SQL(", ").join(sql.Identifier(name) for name in columns)
    return sql.SQL(", ").join(sql.Identifier(prefix, name) for name in columns)


def lock_index(conn: Connection, index_name: str) -> None:
    """Lock the index's `indexes` row until the transaction ends."""
    conn.execute("SELECT 1 FROM indexes WHERE name = %s FOR UPDATE", (index_name,))


def lock_version(conn: Connection, index_name: str) -> tuple[int, int | None] | None:
    """(published version, vector dimension) of the index, its row locked until the transaction ends;
    None: no such index."""
    row = conn.execute(
        "SELECT version, dim FROM indexes WHERE name = %s FOR UPDATE", (index_name,)
    ).fetchone()
    return None if row is None else (int(row[0]), row[1])


def version_of(conn: Connection, index_name: str) -> int | None:
    """The index's published version (0: never published); None: no such index."""
    row = conn.execute("SELECT version FROM indexes WHERE name = %s", (index_name,)).fetchone()
    return None if row is None else int(row[0])


def republish_config(conn: Connection, index_name: str, config: Jsonb) -> int | None:
    """A new version carrying `config` when it differs from the published one; the new version, or None
    when it is the same (the version is kept)."""
    row = conn.execute(
        "UPDATE indexes SET version = version + 1, published_at = now(), config = %s"
        " WHERE name = %s AND config IS DISTINCT FROM %s RETURNING version",
        (config, index_name, config),
    ).fetchone()
    return None if row is None else int(row[0])


def publish_version(
    conn: Connection, index_name: str, config: Jsonb, config_hash: str, model_id: str | None, dim: int | None
) -> int:
    """Bump the index's version, recording its config, model (None: the one it had) and dimension; the new version."""
    row = conn.execute(
        "UPDATE indexes SET version = version + 1, published_at = now(), config = %s, config_hash = %s,"
        " model_id = coalesce(%s, model_id), dim = %s WHERE name = %s RETURNING version",
        (config, config_hash, model_id, dim, index_name),
    ).fetchone()
    return int(row[0])


def bm25_sizes(conn: Connection, index_name: str) -> tuple[int, int] | None:
    """(chunks, total BM25 length) of the published index from its BM25 statistics (None: none yet),
    kept up to date by each publish."""
    row = conn.execute(
        "SELECT n_docs, total_length FROM bm25_stats WHERE index_name = %s", (index_name,)
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def count_rows(conn: Connection, table: str) -> int:
    """The rows of `table` (a partition, or a table being built beside one)."""
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0])


def count_chunks_of(conn: Connection, partition: str, index_name: str, doc_ids: Sequence[str]) -> int:
    """The index's published chunks of `doc_ids` (by the doc_id index, not a scan of the partition)."""
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE index_name = %s AND doc_id = ANY(%s)").format(
            sql.Identifier(partition)
        ),
        (index_name, list(doc_ids)),
    ).fetchone()
    return int(row[0])


def insert_staged_chunks(conn: Connection, table: str, index_name: str) -> tuple[int, int]:
    """Copy an index's staged chunks, with their vectors and BM25 lengths, into `table` (its partition, or
    the swap's new table); returns (rows, sum of BM25 lengths)."""
    staged = column_names(STAGED_CHUNK_COLUMNS)
    published = column_names(CHUNK_COLUMNS)  # the staged columns, then bm25_length and embedding
    inserted, length = conn.execute(
        sql.SQL(
            "WITH i AS (INSERT INTO {} (index_name, {})"
            " SELECT s.index_name, {}, l.length, e.embedding"
            " FROM staged_chunks s"
            " JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
            " JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
            " WHERE s.index_name = %s RETURNING bm25_length)"
            " SELECT count(*), coalesce(sum(bm25_length), 0) FROM i"
        ).format(sql.Identifier(table), _listed(published), _listed(staged, "s")),
        (index_name,),
    ).fetchone()
    return int(inserted), int(length)


def insert_staged_postings(conn: Connection, table: str, index_name: str) -> None:
    """Copy an index's staged BM25 postings, with each chunk's length, into `table`."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (index_name, {})"
            " SELECT b.index_name, b.term, b.chunk_id, b.tf, l.length FROM staged_bm25 b"
            " JOIN staged_bm25_lengths l ON l.index_name = b.index_name AND l.chunk_id = b.chunk_id"
            " WHERE b.index_name = %s"
        ).format(sql.Identifier(table), _listed(column_names(POSTING_COLUMNS))),
        (index_name,),
    )


def remove_chunks(
    conn: Connection, index_name: str, chunks: str, postings: str, full_rebuild: bool
) -> tuple[int, int]:
    """Delete from the `chunks` and `postings` partitions the old chunks of the staged removals (on a
    rebuild, all of them) with their postings and document frequencies; returns (chunks deleted, their
    total BM25 length)."""
    chunks_t, postings_t = sql.Identifier(chunks), sql.Identifier(postings)
    conn.execute("CREATE TEMP TABLE _removed (chunk_id text PRIMARY KEY) ON COMMIT DROP")
    removing = conn.execute(
        sql.SQL(
            "INSERT INTO _removed SELECT c.chunk_id FROM {} c WHERE c.index_name = %s"
            " AND (%s OR c.doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s))"
        ).format(chunks_t),
        (index_name, full_rebuild, index_name),
    ).rowcount
    if not removing:  # only added documents
        return 0, 0
    # planner statistics for the temp table: without them it hash-joins a whole postings partition
    # (30 ms at 100k postings) where the chunk_id index finds a one-document removal's rows
    conn.execute("ANALYZE _removed")
    if full_rebuild:  # every chunk goes, so does every term
        delete_terms(conn, index_name)
    else:
        lowered = conn.execute(
            sql.SQL(
                "UPDATE bm25_terms t SET df = t.df - d.n FROM (SELECT p.term, count(*) AS n FROM {} p"
                " JOIN _removed r ON r.chunk_id = p.chunk_id WHERE p.index_name = %s GROUP BY p.term) d"
                " WHERE t.index_name = %s AND t.term = d.term RETURNING t.term, t.df"
            ).format(postings_t),
            (index_name, index_name),
        ).fetchall()
        emptied = [term for term, df in lowered if df <= 0]  # deleted by key: no vocabulary scan
        if emptied:
            conn.execute(
                "DELETE FROM bm25_terms WHERE index_name = %s AND term = ANY(%s) AND df <= 0",
                (index_name, emptied),
            )
    conn.execute(
        sql.SQL(
            "DELETE FROM {} p USING _removed r WHERE p.index_name = %s AND p.chunk_id = r.chunk_id"
        ).format(postings_t),
        (index_name,),
    )
    deleted, length = conn.execute(
        sql.SQL(
            "WITH d AS (DELETE FROM {} c USING _removed r WHERE c.index_name = %s"
            " AND c.chunk_id = r.chunk_id RETURNING c.bm25_length)"
            " SELECT count(*), coalesce(sum(bm25_length), 0) FROM d"
        ).format(chunks_t),
        (index_name,),
    ).fetchone()
    return int(deleted), int(length)


def delete_terms(conn: Connection, index_name: str) -> None:
    """Delete every BM25 document frequency of the index."""
    conn.execute("DELETE FROM bm25_terms WHERE index_name = %s", (index_name,))


def insert_staged_terms(conn: Connection, index_name: str, *, add: bool) -> None:
    """Copy the index's staged document frequencies into `bm25_terms`; with `add`, a term already
    there gets the staged frequency added to its own."""
    listed = _listed(("index_name", *column_names(TERM_COLUMNS)))
    statement = "INSERT INTO bm25_terms ({}) SELECT {} FROM staged_bm25_terms WHERE index_name = %s"
    if add:
        statement += " ON CONFLICT (index_name, term) DO UPDATE SET df = bm25_terms.df + excluded.df"
    conn.execute(sql.SQL(statement).format(listed, listed), (index_name,))


def document_hashes(conn: Connection, collection: str) -> dict[str, str]:
    """doc_id -> sha256 of every document in the collection now."""
    rows = conn.execute(
        "SELECT doc_id, sha256 FROM documents WHERE collection = %s", (collection,)
    ).fetchall()
    return dict(rows)


def built_hashes(conn: Connection, index_name: str) -> dict[str, str]:
    """doc_id -> sha256 of every document the published index was built from."""
    rows = conn.execute(
        "SELECT doc_id, sha256 FROM index_documents WHERE index_name = %s", (index_name,)
    ).fetchall()
    return dict(rows)


def delete_index_documents(conn: Connection, index_name: str, *, removed_only: bool) -> None:
    """Delete the index's `index_documents` rows: all of them, or with `removed_only` those of its staged removals."""
    if removed_only:
        conn.execute(
            "DELETE FROM index_documents WHERE index_name = %s"
            " AND doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s)",
            (index_name, index_name),
        )
    else:
        conn.execute("DELETE FROM index_documents WHERE index_name = %s", (index_name,))


def insert_staged_index_documents(conn: Connection, index_name: str, *, update: bool) -> None:
    """Copy the index's staged documents into `index_documents`; with `update`, a document already there
    takes the staged sha256."""
    listed = _listed(("index_name", *column_names(INDEX_DOCUMENT_COLUMNS)))
    statement = "INSERT INTO index_documents ({}) SELECT {} FROM staged_documents WHERE index_name = %s"
    if update:
        statement += " ON CONFLICT (index_name, doc_id) DO UPDATE SET sha256 = excluded.sha256"
    conn.execute(sql.SQL(statement).format(listed, listed), (index_name,))


def count_index_documents(conn: Connection, index_name: str) -> int:
    """The documents the published index was built from."""
    row = conn.execute("SELECT count(*) FROM index_documents WHERE index_name = %s", (index_name,)).fetchone()
    return int(row[0])


def published_bm25(conn: Connection, index_name: str) -> dict[str, Any] | None:
    """The published index's `bm25` settings (its resolved analyzers included), None before its first publish."""
    row = conn.execute(
        "SELECT config->'bm25' FROM indexes WHERE name = %s AND version > 0", (index_name,)
    ).fetchone()
    return None if row is None else dict(row[0] or {})
