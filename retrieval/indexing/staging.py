"""The staging area shared by the stages: one `staged_runs` row per index plus the `staged_*` tables."""

from __future__ import annotations

from typing import Any

from psycopg import Connection, sql
from psycopg.types.json import Jsonb

from retrieval.indexing.reports import IndexingError
from retrieval.migrations import STAGING_TABLES


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
    """Empty the index's staging area (all of it unless `tables` names some), in one round trip."""
    with conn.pipeline():
        for table in tables or STAGING_TABLES:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE index_name = %s").format(sql.Identifier(table)), (index_name,)
            )


def staged_run(conn: Connection, index_name: str, step: str) -> tuple[str, bool, str | None]:
    """(config hash, full rebuild, model id) of what stage_chunks staged; an error names `step`."""
    row = conn.execute(
        "SELECT config_hash, full_rebuild, model_id FROM staged_runs WHERE index_name = %s", (index_name,)
    ).fetchone()
    if row is None:
        raise IndexingError(f"{step}: nothing staged for index {index_name!r}; run stage_chunks first")
    return row[0], bool(row[1]), row[2]
