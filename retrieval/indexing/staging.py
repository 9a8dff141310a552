"""The staging area shared by the stages: one `staged_runs` row per index plus the `staged_*` tables.

One writer per index: `stage_chunks` records its run as the staging's owner (`report->>'owner'`);
every later stage of that run checks the owner, under a lock on the `staged_runs` row, in the same
transaction as its writes. A later run of the collection that re-stages the index takes it over and
the earlier run stops at its next stage (`StagingTakenOver`), so no stage ever writes vectors or
postings into chunks another run staged, and publish only applies its own run's staging.
"""

from __future__ import annotations

from chunkyard.retrieval.indexing.stage_reports import IndexingError
from chunkyard.retrieval.store.indexes import analyze
from chunkyard.retrieval.store.staged_rows import StagedRun
from psycopg import Connection

# Staging tables are shared by every index: ANALYZE samples all of their rows (0.75 s at 72k staged
# rows), so only a run that staged at least this many rows refreshes their statistics.
ANALYZE_STAGED_ROWS = 1000


def analyze_staged(conn: Connection, rows_staged: int, *tables: str) -> None:
    """Fresh planner statistics for the staging `tables` after a big load (see ANALYZE_STAGED_ROWS)."""
    if rows_staged >= ANALYZE_STAGED_ROWS:
        for table in tables:
            analyze(conn, table)


class StagingTakenOver(IndexingError):
    """A later run re-staged the index: this run's stages stop (that run publishes the newer documents)."""


def check_owner(step: str, index_name: str, owner: str | None, current: str | None) -> None:
    """Raise `StagingTakenOver` unless `owner` (None: no owner to check) still owns the staging."""
    if owner is not None and current != owner:
        raise StagingTakenOver(
            f"{step}: the staging of index {index_name!r} now belongs to run {current or 'none'}, not "
            f"{owner}: a later run of this collection re-staged it and publishes the newer documents"
        )


def check_run(
    step: str, index_name: str, owner: str | None, run: StagedRun | None, config_hash: str | None = None
) -> StagedRun:
    """`run`, the `staged_runs` row a store call read under its lock (and wrote by only when it was the
    caller's), unless nothing was staged (IndexingError), another run than `owner` staged it
    (`StagingTakenOver`; None: no owner to check) or it was staged with another config than
    `config_hash` (IndexingError; None: not checked). Errors name `step`."""
    if run is None:
        if owner is not None:
            check_owner(step, index_name, owner, None)
        raise IndexingError(f"{step}: nothing staged for index {index_name!r}; run stage_chunks first")
    check_owner(step, index_name, owner, run.owner)
    if config_hash is not None and run.config_hash != config_hash:
        raise IndexingError(f"{step}: {index_name!r} was staged with another config; re-run stage_chunks")
    return run
