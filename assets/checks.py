"""Asset-check glue: the library's checks (`pipeline.checks`) as Dagster check specs and results."""

from __future__ import annotations

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey

from pipeline.checks import CHECKS, Check

_SEVERITY = {"error": AssetCheckSeverity.ERROR, "warn": AssetCheckSeverity.WARN}


def check_specs(kind: str, key: AssetKey) -> list[AssetCheckSpec]:
    """The checks an asset of `kind` reports, declared up front so the UI lists them."""
    return [
        AssetCheckSpec(spec.name, asset=key, description=spec.description) for spec in CHECKS.get(kind, ())
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
