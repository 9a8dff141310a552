"""The assets of one index, in group `collection__config`, made from the step table: chunks -> embeddings + bm25 -> publish.

`pipeline.graph.INDEX_STEPS` declares the steps: each asset depends on the steps its step reads,
runs that step (`pipeline.graph.run_step`) and turns its `StepReport` into metadata and check
results. The checks run inside the asset that produced the data, so they always see this run's
staged rows; error-level ones are blocking, so a failed one stops the later steps in the run, and
automation requests nothing below it until it passes. `publish` is the atomic publish: readers see
the old version or the new one.

Nothing heavy is imported here: the code location loads without torch.
"""

import os
from collections.abc import Sequence
from typing import Any

from chunkyard.assets.keys import documents_key, group_name, index_key
from chunkyard.assets.progress import step_progress
from chunkyard.assets.resources import EmbedderResource, PostgresResource
from chunkyard.assets.results import check_specs, materialize_result
from chunkyard.chunking.environment import env_int
from chunkyard.pipeline.graph import INDEX_STEPS, IndexStep, run_step, step
from chunkyard.pipeline.step_report import StepRun
from chunkyard.pipeline.versions import code_version, config_settings
from chunkyard.retrieval.embedders.embedder import Embedder
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    MaterializeResult,
    asset,
)

# CHUNKYARD_EMBED_SHARDS=n (n > 1, where the code location and the workers load): each index's
# embedding work is split into n `embeddings_part<k>` assets that fill the embedding cache at once on
# any workers (retrieval.indexing.embed_shards); `embeddings` then stages the cached vectors.
SHARDS_ENV = "CHUNKYARD_EMBED_SHARDS"
CELERY_PRIORITY_TAG = "dagster-celery/priority"  # dagster-celery's step priority (its default is 5)


def part_kinds() -> list[str]:
    """`embeddings_part0` .. of CHUNKYARD_EMBED_SHARDS (none when unset or 1)."""
    shards = env_int(SHARDS_ENV, 1) or 1
    return [f"embeddings_part{k}" for k in range(shards)] if shards > 1 else []


def describe(spec: IndexSpec, what: str) -> str:
    """The UI description of one asset of an index: `what` it holds, then the index config."""
    config = spec.config
    chunker = ", ".join(f"{k}={v}" for k, v in sorted(config.chunker.items()))
    return (
        f"{what} for index `{spec.name}`.\n\n{config.description or 'Index config ' + config.name}\n\n"
        f"chunker: {chunker}; model: {config.embedding_model}"
    )


def config_metadata(spec: IndexSpec) -> dict[str, str]:
    """The index config's settings as the metadata every asset of the index shows."""
    config = spec.config
    return {
        "index": spec.name,
        "config": config.name,
        "strategy": str(config.chunker.get("strategy")),
        "chunk_size": str(config.chunker.get("size", "")),
        "overlap": str(config.chunker.get("overlap", "")),
        "tokenizer": str(config.chunker.get("tokenizer", "")),
        "embedding_model": config.embedding_model,
        "config_hash": config.config_hash,
    }


# The UI's kind tag per `embedder.backend` (Dagster shows `pytorch` and `onnx` with their logos).
BACKEND_KINDS = {"torch": "pytorch", "onnx": "onnx", "static": "numpy", "openai": "openai"}


def embedding_kind(config: IndexConfig) -> str:
    """The kind tag of an index's embeddings asset: the backend that computes its vectors (the
    CHUNKYARD_EMBEDDER_BACKEND override included, as `retrieval.embedders.embedder.embedder_for_config` reads it)."""
    backend = (config.embedder or {}).get("backend") or "torch"
    if backend != "openai":
        backend = os.environ.get("CHUNKYARD_EMBEDDER_BACKEND") or backend
    return BACKEND_KINDS.get(backend, backend)


def index_asset_options(
    spec: IndexSpec, name: str, what: str, declared: str, settings: dict, checks: list[AssetCheckSpec]
) -> dict:
    """What every asset of an index declares: key, group, description, code version, checks."""
    return {
        "key": index_key(spec.name, name),
        "group_name": group_name(spec.name),
        "description": describe(spec, what),
        "code_version": code_version(name, declared, {"collection": spec.collection, **settings}),
        "metadata": config_metadata(spec),
        "check_specs": checks,
    }


def after_passing_checks() -> AutomationCondition:
    """`eager()`, held back while a blocking check of a parent has failed (a failed staged check
    leaves the chunks materialized: their children must not publish them on the next tick)."""
    return AutomationCondition.eager() & AutomationCondition.all_deps_blocking_checks_passed()


def step_options(spec: IndexSpec, declared: IndexStep) -> dict:
    """The asset options of one step of an index, from its entry in the step table."""
    key = index_key(spec.name, declared.name)
    deps = [index_key(spec.name, parent) for parent in declared.reads] or [documents_key(spec.collection)]
    return {
        **index_asset_options(
            spec,
            declared.name,
            declared.description,
            declared.code_version,
            config_settings(spec.config, declared.settings),
            check_specs(declared.checks, key, blocking=True),
        ),
        "deps": deps,
        "automation_condition": after_passing_checks(),
        "kinds": set(declared.kinds),
    }


def step_asset(
    spec: IndexSpec, declared: IndexStep, more_deps: Sequence[AssetKey] = (), **extra: Any
) -> AssetsDefinition:
    """One step of one index as an asset (`extra`: asset options over the table's); it asks for the
    embedder resource only where the step uses the model (an index whose chunker embeds nothing
    chunks without torch)."""
    options = {**step_options(spec, declared), **extra}
    options["deps"] = [*options["deps"], *more_deps]
    unit, done_what = declared.progress

    def run(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: Embedder | None
    ) -> MaterializeResult:
        progress = step_progress(context.log, unit, done_what)  # counts, rate, time left in the step log
        report = run_step(declared, postgres.store(), spec, embedder, StepRun(context.run.run_id, progress))
        return materialize_result(context, report)

    if declared.uses_embedder(spec.config):

        @asset(**options)
        def with_model(
            context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
        ) -> MaterializeResult:
            return run(context, postgres, embedder.for_config(spec.config))

        return with_model

    @asset(**options)
    def without_model(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        return run(context, postgres, None)

    return without_model


def build_index_assets(spec: IndexSpec) -> list[AssetsDefinition]:
    """Every step of the table as an asset of one index (and the embedding parts, when sharded)."""
    parts = [embedding_part(spec, k, len(part_kinds())) for k in range(len(part_kinds()))]
    built = []
    for declared in INDEX_STEPS:
        extra: dict[str, Any] = {}
        if declared.name == "embeddings":  # after its shards; the backend's kind; one model at a time
            extra = {
                "more_deps": [part.key for part in parts],
                "kinds": {*declared.kinds, embedding_kind(spec.config)},
                "pool": "embedding",
            }
        elif declared.name == "bm25":
            # below the embedding parts' default priority: on Celery the parts are sent first, so two
            # workers start them at once and bm25 follows one of them (sent first, it delayed a part
            # by its own time)
            extra = {"op_tags": {CELERY_PRIORITY_TAG: "4"}}
        built.append(step_asset(spec, declared, **extra))
        if declared.name == "chunks":
            built.extend(parts)
    return built


def embedding_part(spec: IndexSpec, k: int, n: int) -> AssetsDefinition:
    """Shard k of n of the embedding work; in the `embedding` pool only for a local model (a server's
    requests cost this machine little, so the parts against one run at once)."""
    declared = step("embeddings")
    options = index_asset_options(
        spec,
        f"embeddings_part{k}",
        f"Embedding cache filled for shard {k} of {n} of the staged chunks' content hashes",
        declared.code_version,
        config_settings(spec.config, declared.settings),
        [],
    )
    remote = (spec.config.embedder or {}).get("backend") == "openai"

    @asset(
        **options,
        deps=[index_key(spec.name, "chunks")],
        automation_condition=after_passing_checks(),
        kinds={"pgvector"},
        pool=None if remote else "embedding",
    )
    def part(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
    ) -> MaterializeResult:
        from chunkyard.pipeline.steps.embeddings import embed_part

        model = embedder.for_config(spec.config)
        report = embed_part(postgres.store(), spec, model, k, n, owner=context.run.run_id)
        return materialize_result(context, report)

    return part
