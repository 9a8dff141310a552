"""Evaluation reports stored against the index version they measured."""

from __future__ import annotations

from typing import Any, Protocol

from chunkyard.retrieval.store.pool import Pool
from psycopg.types.json import Jsonb


class RecordableReport(Protocol):
    """What `Evaluations.record` stores: an `evaluation.runner.EvaluationReport` (named by shape,
    since the store sits below the evaluation package)."""

    dataset: str

    def as_dict(self) -> dict[str, Any]: ...


class Evaluations:
    """The `evaluations` table: one JSONB report per evaluation run."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def record(self, index_name: str, report: RecordableReport) -> int:
        """Store the report's `as_dict()` (JSONB) against the index's current version."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO evaluations (index_name, dataset, index_version, report)"
                " VALUES (%s, %s, (SELECT version FROM indexes WHERE name = %s), %s) RETURNING id",
                (index_name, report.dataset, index_name, Jsonb(report.as_dict())),
            ).fetchone()
        return int(row[0])

    def latest(self, index_name: str) -> dict[str, Any] | None:
        """The dict the latest `record` stored (None if never evaluated)."""
        record = self.latest_record(index_name)
        return None if record is None else record["report"]

    def latest_record(self, index_name: str) -> dict[str, Any] | None:
        """The latest report with its dataset, index version and time (None if never evaluated)."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT dataset, index_version, report, created_at FROM evaluations"
                " WHERE index_name = %s ORDER BY created_at DESC, id DESC LIMIT 1",
                (index_name,),
            ).fetchone()
        if row is None:
            return None
        return {
            "dataset": row[0],
            "index_version": row[1],
            "report": row[2],
            "created_at": row[3].isoformat(),
        }
