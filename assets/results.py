"""A step's `StepReport` as Dagster sees it: metadata, check specs and (blocking) check results."""

from __future__ import annotations

from collections.abc import Sequence

from chunkyard.pipeline.checks import Check, DeclaredCheck
from chunkyard.pipeline.step_report import StepReport
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
)

ID_LIST_LIMIT = 50
FAILURE_ROWS = 200  # files that produced no document, listed in the documents asset's table
FAILURE_SCHEMA = TableSchema(columns=[TableColumn("file", "string"), TableColumn("reason", "string")])
_SEVERITY = {"error": AssetCheckSeverity.ERROR, "warn": AssetCheckSeverity.WARN}


def check_specs(declared: Sequence[DeclaredCheck], key: AssetKey, *, blocking: bool) -> list[AssetCheckSpec]:
    """The checks an asset reports, declared up front so the UI lists them. An index step's
    (`blocking`) error-level checks are blocking: the run does not materialize what follows, so a
    failed staged check leaves the previous version published."""
    return [
        AssetCheckSpec(
            check.name,
            asset=key,
            description=check.description,
            blocking=blocking and check.severity == "error",
        )
        for check in declared
    ]


def check_result(key: AssetKey, check: Check) -> AssetCheckResult:
    """One library check outcome as the asset's check result."""
    return AssetCheckResult(
        asset_key=key,
        check_name=check.name,
        passed=check.passed,
        metadata=dict(check.metadata),
        severity=_SEVERITY[check.severity],
    )


def _id_list(ids: Sequence[str], limit: int = ID_LIST_LIMIT) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" ... (+{len(ids) - limit})" if len(ids) > limit else "") if ids else "-"


def materialize_result(context: AssetExecutionContext, report: StepReport) -> MaterializeResult:
    """A step's report as the asset's result: numbers stay numbers (plotted), texts become text,
    markdown and paths their kinds; warnings go to the run's log, checks to check results."""
    for warning in report.warnings:
        context.log.warning(warning)
    metadata: dict[str, int | float | MetadataValue] = {
        key: value if isinstance(value, int | float) else MetadataValue.text(str(value))
        for key, value in report.metadata.items()
    }
    metadata.update({key: MetadataValue.text(_id_list(ids)) for key, ids in report.ids.items()})
    metadata.update({key: MetadataValue.md(text) for key, text in report.markdown.items()})
    metadata.update({key: MetadataValue.path(path) for key, path in report.paths.items()})
    if report.failures is not None:  # the documents step's: a table the UI shows and the CLI reads
        rows = [TableRecord({"file": f.path, "reason": f.reason}) for f in report.failures[:FAILURE_ROWS]]
        metadata["failures"] = MetadataValue.table(rows, schema=FAILURE_SCHEMA)
    return MaterializeResult(
        metadata=metadata, check_results=[check_result(context.asset_key, c) for c in report.checks]
    )
