"""The Dagster code location: `dagster dev -m assets.definitions`.

Built from configs/indexes.yaml and configs/collections.yaml at load time. Loading imports no
torch: models load inside runs (see assets.resources).
"""

from __future__ import annotations

from pathlib import Path

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
)

from assets.executors import build_executor
from assets.indexes import build_all
from assets.resources import EmbedderResource, PostgresResource
from assets.schedules import build_nightly_evaluation_schedule
from assets.sensors import build_document_sensor
from chunking.environment import env_int
from retrieval.config import load_collection_configs

# Seconds between declarative-automation ticks (evaluations and leaderboards after a publish).
AUTOMATION_INTERVAL_ENV = "CHUNKYARD_AUTOMATION_INTERVAL"
AUTOMATION_INTERVAL_SECONDS = 30


def build_definitions(
    indexes_path: str | Path | None = None,
    collections_path: str | Path | None = None,
    *,
    database_url: str | None = None,
) -> Definitions:
    """Everything Dagster shows: assets and checks per config, the sensor, schedule and resources."""
    built = build_all(indexes_path, collections_path)
    collections = load_collection_configs(collections_path)
    assets = [a for c in built.values() for a in c.assets]
    sensors = [
        AutomationConditionSensorDefinition(
            "chunkyard_automation",
            target=AssetSelection.all(),
            default_status=DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=env_int(
                AUTOMATION_INTERVAL_ENV, AUTOMATION_INTERVAL_SECONDS, unit="whole seconds"
            ),
            description="Runs evaluations and leaderboards (and anything downstream) after an index changes.",
        )
    ]
    document_sensor = build_document_sensor(collections, {n: c.indexing_keys for n, c in built.items()})
    if document_sensor is not None:
        sensors.append(document_sensor)
    schedule = build_nightly_evaluation_schedule(
        [k for c in built.values() for k in c.evaluation_keys],
        [c.leaderboard_key for c in built.values() if c.leaderboard_key is not None],
    )
    return Definitions(
        assets=assets,
        sensors=sensors,
        schedules=[schedule] if schedule else [],
        resources={
            "postgres": PostgresResource(url=database_url),
            "embedder": EmbedderResource(),
        },
        # Multiprocess by default (steps in parallel, one per CPU; the `embedding` pool caps the
        # model-heavy steps). A run may ask for `execution: {config: {in_process: {}}}`: the
        # document sensor does for small change sets, where process start-up would dominate.
        # `celery` sends steps to Celery workers (the default when CHUNKYARD_CELERY_BROKER is set).
        executor=build_executor(),
    )


defs = build_definitions()
