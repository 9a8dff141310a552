"""Evaluation and leaderboard only when their inputs changed: `inputs_version` and `unchanged_result`.

Each of the two assets names its inputs by one hash, its Dagster data version: the evaluation's is the
published index version (and its coarse companion's), the eval set's content and the asset's code
version (which holds the evaluation settings: variants, k, the config's fields); the leaderboard's
is the latest stored evaluation of each of its indexes and its own code version. When the asset's
latest materialization has the same data version, the step does not evaluate: it records a
materialization with that data version again, the previous metadata carried over (the UI keeps the
numbers) and `skipped` saying why; `chunkyard index` prints "unchanged, skipped".

Why not Dagster's other means: declarative automation conditions (`code_version_changed`,
`any_deps_updated`) decide what the daemon's ticks request, not what a run that `chunkyard index`
starts executes, and that run selects every asset of the collection. An asset that yields no output
(`output_required=False`) is Dagster's own skip, but then Dagster skips every step below it: the
leaderboard would not run when one index was re-evaluated and another was not. A repeated data
version is how Dagster itself reads "materialized, unchanged": what is below it does not turn stale.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
)

INPUTS = "inputs_version"  # metadata: the data version, readable where the data version is not shown
SKIPPED = "skipped"  # metadata of a materialization that evaluated nothing


def inputs_version(context: AssetExecutionContext, inputs: dict[str, Any]) -> str:
    """One hash of `inputs` and the asset's code version (its declared settings)."""
    code = context.assets_def.code_versions_by_key.get(context.asset_key)
    payload = json.dumps({"code_version": code, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def unchanged_result(context: AssetExecutionContext, version: str, why: str) -> MaterializeResult | None:
    """The asset's latest materialization repeated (no work) when it had data version `version`; else None."""
    latest = context.instance.get_latest_materialization_event(context.asset_key)
    materialization = latest.asset_materialization if latest else None
    if materialization is None:
        return None
    before = materialization.metadata.get(INPUTS)
    if before is None or getattr(before, "value", before) != version:
        return None
    metadata = {key: value for key, value in materialization.metadata.items() if key != SKIPPED}
    metadata[SKIPPED] = MetadataValue.text(f"unchanged, skipped: {why} as at run {latest.run_id}")
    context.log.info(f"{context.asset_key.to_user_string()}: unchanged, skipped ({why} unchanged)")
    # a declared check is reported by every materialization: passed, since nothing was evaluated
    checks = [
        AssetCheckResult(
            asset_key=context.asset_key,
            check_name=spec.name,
            passed=True,
            metadata={"note": f"unchanged, skipped: {why} as at run {latest.run_id}"},
            severity=AssetCheckSeverity.WARN,
        )
        for spec in context.assets_def.check_specs
        if spec.asset_key == context.asset_key
    ]
    return MaterializeResult(metadata=metadata, check_results=checks, data_version=DataVersion(version))


def versioned(result: MaterializeResult, version: str) -> MaterializeResult:
    """`result` with data version `version`, also in its metadata (`inputs_version`)."""
    return MaterializeResult(
        metadata={**(result.metadata or {}), INPUTS: MetadataValue.text(version)},
        check_results=result.check_results,
        data_version=DataVersion(version),
    )
