"""The Dagster code location: `dagster dev -m assets.definitions`.

Per collection: `[collection, "documents"]` (folder or dataset -> Postgres) and, if it has
questions, `[collection, "leaderboard"]` (and `promotion` with a `serve:` section). Per index (the
specs of `load_index_specs`, coarse companions included), in group `collection__config`: `chunks`
-> `embeddings` + `bm25` -> `publish` (atomic) -> `evaluation` (for the configs the
collection lists). Built from configs/indexes.yaml and configs/collections.yaml when Dagster
loads the code location (`defs`, a `@definitions` function), never on import. Loading imports no
torch: models load inside runs (see assets.resources).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chunkyard.assets.documents import build_documents_asset
from chunkyard.assets.evaluation import build_evaluation_asset, build_leaderboard_asset, build_promotion_asset
from chunkyard.assets.executors import build_executor
from chunkyard.assets.indexes import build_index_assets, part_kinds
from chunkyard.assets.keys import check_spellings, index_job_name, index_key
from chunkyard.assets.resources import EmbedderResource, PostgresResource
from chunkyard.assets.schedules import build_nightly_evaluation_schedule
from chunkyard.assets.sensors import build_document_sensor, build_janitor_sensor
from chunkyard.chunking.environment import env_int
from chunkyard.pipeline.graph import STEP_NAMES
from chunkyard.retrieval.settings.config import Collection, IndexSpec, load_collections
from chunkyard.retrieval.settings.config_checks import CheckedProject, load_index_specs
from chunkyard.retrieval.settings.project import automation_enabled
from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    JobDefinition,
    define_asset_job,
    definitions,
)

# Seconds between declarative-automation ticks (evaluations and leaderboards after a publish).
AUTOMATION_INTERVAL_ENV = "CHUNKYARD_AUTOMATION_INTERVAL"
AUTOMATION_INTERVAL_SECONDS = 30


@dataclass
class CollectionAssets:
    """The assets built for one collection, and the keys the sensor and CLI select."""

    collection: Collection
    assets: list[AssetsDefinition] = field(default_factory=list)
    documents_key: AssetKey | None = None
    # documents + every index step of every index: what a document change re-runs.
    indexing_keys: list[AssetKey] = field(default_factory=list)
    index_names: list[str] = field(default_factory=list)  # what those runs publish (the reconciler's)
    evaluation_keys: list[AssetKey] = field(default_factory=list)
    leaderboard_key: AssetKey | None = None

    @property
    def keys(self) -> list[AssetKey]:
        return [k for a in self.assets for k in a.keys]


def build_collection_assets(collection: Collection, specs: Sequence[IndexSpec]) -> CollectionAssets:
    """The documents asset, every index's assets (companions too) and the leaderboard of one collection."""
    built = CollectionAssets(collection)
    docs = build_documents_asset(collection)
    built.assets.append(docs)
    built.documents_key = docs.key
    built.indexing_keys.append(docs.key)
    has_questions = bool(collection.dataset or collection.eval_set)
    listed = [spec for spec in specs if spec.config.name in collection.indexes]
    for spec in specs:
        built.assets.extend(build_index_assets(spec))
        built.indexing_keys.extend(index_key(spec.name, k) for k in (*STEP_NAMES, *part_kinds()))
        built.index_names.append(str(spec.name))
        if has_questions and spec in listed:
            built.assets.append(build_evaluation_asset(collection, spec))
            built.evaluation_keys.append(index_key(spec.name, "evaluation"))
    if has_questions and listed:
        board = build_leaderboard_asset(collection, listed)
        built.assets.append(board)
        built.leaderboard_key = board.key
        if collection.serve is not None:
            built.assets.append(build_promotion_asset(collection, listed))
    return built


INDEX_ALL_JOB = "index_all"  # `chunkyard index` with several collections


def build_index_jobs(built: dict[str, CollectionAssets]) -> list:
    """A named job per collection (its every asset), and `index_all` over all of them."""
    jobs = [
        define_asset_job(
            index_job_name(name),
            selection=AssetSelection.assets(*c.keys),
            description=f"Index collection {name!r}: documents, every index, evaluations (`chunkyard index {name}`)",
        )
        for name, c in built.items()
        if c.keys
    ]
    every = [k for c in built.values() for k in c.keys]
    if every:
        jobs.append(
            define_asset_job(
                INDEX_ALL_JOB, selection=AssetSelection.assets(*every), description="Index every collection"
            )
        )
    return jobs


def index_job(defs: Definitions, collections: Sequence[str]) -> JobDefinition:
    """The named job for `chunkyard index` over `collections` (one: its own; several: `index_all`)."""
    return defs.resolve_job_def(index_job_name(collections[0]) if len(collections) == 1 else INDEX_ALL_JOB)


def build_all(
    indexes_path: str | Path | None = None,
    collections_path: str | Path | None = None,
    *,
    checked: CheckedProject | None = None,
) -> dict[str, CollectionAssets]:
    """Assets for every collection of collections.yaml and every index `load_index_specs` returns (or
    those of the project `checked` already, read and checked once by `chunkyard index`)."""
    if checked is not None:
        specs, collections = list(checked.specs), checked.collections
    else:
        specs = load_index_specs(indexes_path, collections_path)
        collections = load_collections(collections_path)
    check_spellings("collections", collections)
    for name in collections:
        check_spellings(
            f"collections.{name}: index configs", {s.config.name for s in specs if s.collection == name}
        )
    return {
        name: build_collection_assets(collection, [s for s in specs if s.collection == name])
        for name, collection in collections.items()
    }


def build_definitions(
    indexes_path: str | Path | None = None,
    collections_path: str | Path | None = None,
    *,
    database_url: str | None = None,
    checked: CheckedProject | None = None,
) -> Definitions:
    """Everything Dagster shows: assets and checks per config, the sensor, schedule and resources
    (from the settings files, or from the project `checked` already)."""
    built = build_all(indexes_path, collections_path, checked=checked)
    collections = {name: assets.collection for name, assets in built.items()}
    assets = [a for c in built.values() for a in c.assets]
    # Running unless the loading process says no (`chunkyard ui` without `ui_automation: true`).
    status = DefaultSensorStatus.RUNNING if automation_enabled() else DefaultSensorStatus.STOPPED
    sensors = [
        AutomationConditionSensorDefinition(
            "chunkyard_automation",
            target=AssetSelection.all(),
            default_status=status,
            minimum_interval_seconds=env_int(
                AUTOMATION_INTERVAL_ENV, AUTOMATION_INTERVAL_SECONDS, unit="whole seconds"
            ),
            description="Runs evaluations and leaderboards (and anything downstream) after an index changes.",
        ),
        build_janitor_sensor(),
    ]
    jobs = build_index_jobs(built)
    named = {j.name: j for j in jobs}
    document_sensor = build_document_sensor(
        collections,
        {n: c.indexing_keys for n, c in built.items()},
        index_names={n: c.index_names for n, c in built.items()},
        default_status=status,
        jobs={n: named[index_job_name(n)] for n, c in built.items() if c.keys},
    )
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
        jobs=jobs,
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


@definitions
def defs() -> Definitions:
    """What `dagster dev -m assets.definitions` loads: built when Dagster asks, not at import."""
    return build_definitions()
