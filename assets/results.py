"""A step's `StepReport` as Dagster sees it: metadata, check specs and (blocking) check results."""

from __future__ import annotations

from collections.abc import Sequence

from chunkyard.pipeline.checks import CHECKS, Check
from chunkyard.pipeline.graph import blocks
from chunkyard.pipeline.step_report import StepReport
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    MaterializeResult,
    MetadataValue,
)

ID_LIST_LIMIT = 50
_SEVERITY = {"error": AssetCheckSeverity.ERROR, "warn": AssetCheckSeverity.WARN}


def check_specs(kind: str, key: AssetKey) -> list[AssetCheckSpec]:
    """The checks an asset of `kind` reports, declared up front so the UI lists them; those whose
    failure stops the later steps (`pipeline.graph.blocks`) are blocking: the run does not
    materialize what follows, so a failed staged check leaves the previous version published."""
    return [
        AssetCheckSpec(
            spec.name, asset=key, description=spec.description, blocking=blocks(kind, spec.severity)
        )
        for spec in CHECKS.get(kind, ())
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
    return MaterializeResult(
        metadata=metadata, check_results=[check_result(context.asset_key, c) for c in report.checks]
    )
