"""Nightly re-evaluation of every index (off by default: turn it on in the UI)."""

from __future__ import annotations

from collections.abc import Sequence

from dagster import (
    AssetKey,
    AssetSelection,
    DefaultScheduleStatus,
    ScheduleDefinition,
    define_asset_job,
)

NIGHTLY_CRON = "0 2 * * *"


def build_nightly_evaluation_schedule(
    evaluation_keys: Sequence[AssetKey], leaderboard_keys: Sequence[AssetKey]
) -> ScheduleDefinition | None:
    """Re-run every evaluation and leaderboard at 02:00 UTC; STOPPED until an operator starts it."""
    keys = [*evaluation_keys, *leaderboard_keys]
    if not keys:
        return None
    job = define_asset_job(
        "nightly_evaluation_job",
        selection=AssetSelection.assets(*keys),
        description="Re-evaluate every published index and rebuild the leaderboards.",
        tags={"chunkyard/trigger": "nightly_evaluation"},
    )
    return ScheduleDefinition(
        name="nightly_evaluation",
        job=job,
        cron_schedule=NIGHTLY_CRON,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.STOPPED,
        description="Nightly re-evaluation (catches drift in models, data or code). Off by default.",
    )
