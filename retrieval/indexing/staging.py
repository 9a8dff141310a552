"""The staging area shared by the stages: one `staged_runs` row per index plus the `staged_*` tables.

One writer per index: `stage_chunks` records its run as the staging's owner (`report->>'owner'`);
every later stage of that run checks the owner, under a lock on the `staged_runs` row, in the same
transaction as its writes. A later run of the collection that re-stages the index takes it over and
the earlier run stops at its next stage (`StagingTakenOver`), so no stage ever writes vectors or
postings into chunks another run staged, and publish only applies its own run's staging.
"""

from __future__ import annotations

from typing import Any

from chunkyard.retrieval.indexing.stage_reports import IndexingError
from chunkyard.retrieval.store.migrations import STAGING_TABLES
from chunkyard.retrieval.store.partitions import drop_next_tables
from psycopg import Connection, sql
from psycopg.types.json import Jsonb


def merge_stage_report(conn: Connection, index_name: str, values: dict[str, Any]) -> None:
    """Add one stage's report to the run's, so publish can report what every stage did."""
    conn.execute(
        "UPDATE staged_runs SET report = report || %s WHERE index_name = %s",
        (Jsonb(values), index_name),
    )


# Staging tables are shared by every index: ANALYZE samples all of their rows (0.75 s at 72k staged
# rows), so only a run that staged at least this many rows refreshes their statistics.
ANALYZE_STAGED_ROWS = 1000


def analyze_staged(conn: Connection, rows_staged: int, *tables: str) -> None:
    """Fresh planner statistics for the staging `tables` after a big load (see ANALYZE_STAGED_ROWS)."""
    if rows_staged >= ANALYZE_STAGED_ROWS:
        for table in tables:
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


def clear_staging(conn: Connection, index_name: str, tables: tuple[str, ...] | None = None) -> None:
    """Empty the index's staging area (all of it, postings prepared for a swap included, unless `tables`
    names some), in one round trip."""
    if tables is None:
        drop_next_tables(conn, index_name)
    with conn.pipeline():
        for table in tables or STAGING_TABLES:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE index_name = %s").format(sql.Identifier(table)), (index_name,)
            )


class StagingTakenOver(IndexingError):
    """A later run re-staged the index: this run's stages stop (that run publishes the newer documents)."""


def check_owner(step: str, index_name: str, owner: str | None, current: str | None) -> None:
    """Raise `StagingTakenOver` unless `owner` (None: no owner to check) still owns the staging."""
    if owner is not None and current != owner:
        raise StagingTakenOver(
            f"{step}: the staging of index {index_name!r} now belongs to run {current or 'none'}, not "
            f"{owner}: a later run of this collection re-staged it and publishes the newer documents"
        )


def staged_run(
    conn: Connection, index_name: str, step: str, owner: str | None = None
) -> tuple[str, bool, str | None]:
    """(config hash, full rebuild, model id) of what stage_chunks staged; an error names `step`.

    Locks the `staged_runs` row until the transaction ends and checks that `owner` staged it.
    """
    row = conn.execute(
        "SELECT config_hash, full_rebuild, model_id, report->>'owner' FROM staged_runs"
        " WHERE index_name = %s FOR UPDATE",
        (index_name,),
    ).fetchone()
    if row is None:
        if owner is not None:
            check_owner(step, index_name, owner, None)
        raise IndexingError(f"{step}: nothing staged for index {index_name!r}; run stage_chunks first")
    check_owner(step, index_name, owner, row[3])
    return row[0], bool(row[1]), row[2]


def insert_staged_chunks(conn: Connection, table: str, index_name: str) -> tuple[int, int]:
    """Copy an index's staged chunks, with their vectors and BM25 lengths, into `table` (its partition, or
    the swap's new table); returns (rows, sum of BM25 lengths). Both publish paths insert the same rows."""
    inserted, length = conn.execute(
        sql.SQL(
            'WITH i AS (INSERT INTO {} (index_name, chunk_id, doc_id, start, "end", text, embed_text,'
            " token_count, content_hash, metadata, parent_id, bm25_length, embedding)"
            ' SELECT s.index_name, s.chunk_id, s.doc_id, s.start, s."end", s.text, s.embed_text,'
            " s.token_count, s.content_hash, s.metadata, s.parent_id, l.length, e.embedding"
            " FROM staged_chunks s"
            " JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
            " JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
            " WHERE s.index_name = %s RETURNING bm25_length)"
            " SELECT count(*), coalesce(sum(bm25_length), 0) FROM i"
        ).format(sql.Identifier(table)),
        (index_name,),
    ).fetchone()
    return int(inserted), int(length)


def insert_staged_postings(conn: Connection, table: str, index_name: str) -> None:
    """Copy an index's staged BM25 postings, with each chunk's length, into `table`."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (index_name, term, chunk_id, tf, doc_len)"
            " SELECT b.index_name, b.term, b.chunk_id, b.tf, l.length FROM staged_bm25 b"
            " JOIN staged_bm25_lengths l ON l.index_name = b.index_name AND l.chunk_id = b.chunk_id"
            " WHERE b.index_name = %s"
        ).format(sql.Identifier(table)),
        (index_name,),
    )
