"""The assets of one index, in group `collection__config`: chunks -> embeddings + bm25 -> index.

The steps and their order are `pipeline.graph.INDEX_STEPS`: each asset depends on the kinds its
step reads, calls that step's `pipeline.steps` function and turns its `StepReport` into metadata
and check results. The checks run inside the asset that produced the data, so they always see
this run's staged rows; error-level ones are blocking, so a failed one stops the later steps in
the run, and automation requests nothing below it until it passes. `index` is the atomic
publish: readers see the old version or the new one.

Nothing heavy is imported here: the code location loads without torch.
"""

import os

from chunkyard.assets.keys import documents_key, group_name, index_key
from chunkyard.assets.progress import step_progress
from chunkyard.assets.resources import EmbedderResource, PostgresResource
from chunkyard.assets.results import check_specs, materialize_result
from chunkyard.chunking.environment import env_int
from chunkyard.chunking.registry import needs_embedding_model
from chunkyard.pipeline.graph import step
from chunkyard.pipeline.steps.evaluation import EVALUATION_K
from chunkyard.pipeline.versions import code_version, index_settings
from chunkyard.retrieval.config import IndexConfig, IndexSpec
from dagster import (
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


def describe(spec: IndexSpec, kind: str) -> str:
    """The UI description of the `kind` asset of one index."""
    config = spec.config
    chunker = ", ".join(f"{k}={v}" for k, v in sorted(config.chunker.items()))
    what = {
        "chunks": "Chunk set (staged; only added/changed documents are re-chunked)",
        "embeddings": "Embeddings of the staged chunks (content-hash cache across configs and runs)",
        "bm25": "BM25 term frequencies of the staged chunks",
        "index": "Atomic publish of staged chunks, vectors and postings (readers see old or new)",
        "evaluation": f"hit@{EVALUATION_K}, MRR@{EVALUATION_K} and span metrics per variant (search mode, reranked, served)",
    }[kind]
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
    CHUNKYARD_EMBEDDER_BACKEND override included, as `retrieval.embedder.embedder_for_config` reads it)."""
    backend = (config.embedder or {}).get("backend") or "torch"
    if backend != "openai":
        backend = os.environ.get("CHUNKYARD_EMBEDDER_BACKEND") or backend
    return BACKEND_KINDS.get(backend, backend)


def index_asset_options(spec: IndexSpec, kind: str, settings: dict | None = None) -> dict:
    """What every asset of an index declares: key, group, description, code version, checks."""
    settings = settings or index_settings(spec.config, kind)
    key = index_key(spec.name, kind)
    return {
        "key": key,
        "group_name": group_name(spec.name),
        "description": describe(spec, kind),
        "code_version": code_version(kind, {"collection": spec.collection, **settings}),
        "metadata": config_metadata(spec),
        "check_specs": check_specs(kind, key),
    }


def after_passing_checks() -> AutomationCondition:
    """`eager()`, held back while a blocking check of a parent has failed (a failed staged check
    leaves the chunks materialized: their children must not publish them on the next tick)."""
    return AutomationCondition.eager() & AutomationCondition.all_deps_blocking_checks_passed()


def step_options(spec: IndexSpec, kind: str) -> dict:
    """`index_asset_options` plus the step's parents (`pipeline.graph`) and its automation."""
    parents = step(kind).after
    deps = [index_key(spec.name, parent) for parent in parents] or [documents_key(spec.collection)]
    return {
        **index_asset_options(spec, kind),
        "deps": deps,
        "automation_condition": after_passing_checks(),
    }


def build_index_assets(spec: IndexSpec) -> list[AssetsDefinition]:
    """chunks -> embeddings + bm25 -> index for one index."""
    config = spec.config
    chunk_options = {**step_options(spec, "chunks"), "kinds": {"python", "postgres"}}
    if needs_embedding_model(config.chunker):

        @asset(**chunk_options)
        def chunks(
            context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
        ) -> MaterializeResult:
            from chunkyard.pipeline.steps.chunks import chunk

            model = embedder.for_config(config)
            progress = step_progress(context.log, "documents", "chunked")
            return materialize_result(
                context, chunk(postgres.store(), spec, model, owner=context.run.run_id, progress=progress)
            )

    else:

        @asset(**chunk_options)
        def chunks(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
            from chunkyard.pipeline.steps.chunks import chunk

            progress = step_progress(context.log, "documents", "chunked")
            report = chunk(postgres.store(), spec, owner=context.run.run_id, progress=progress)
            return materialize_result(context, report)

    parts = [embedding_part(spec, k, len(part_kinds())) for k in range(len(part_kinds()))]
    embedding_options = step_options(spec, "embeddings")
    embedding_options["deps"] = [*embedding_options["deps"], *(part.key for part in parts)]

    @asset(**embedding_options, kinds={embedding_kind(config), "pgvector"}, pool="embedding")
    def embeddings(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
    ) -> MaterializeResult:
        from chunkyard.pipeline.steps.embeddings import embed

        progress = step_progress(context.log, "chunks", "embedded")  # counts, rate, time left in the step log
        return materialize_result(
            context,
            embed(postgres.store(), spec, embedder.for_config(config), progress, owner=context.run.run_id),
        )

    # below the embedding parts' default priority: on Celery the parts are sent first, so two workers
    # start them at once and bm25 follows one of them (sent first, it delayed a part by its own time)
    @asset(**step_options(spec, "bm25"), kinds={"python", "postgres"}, op_tags={CELERY_PRIORITY_TAG: "4"})
    def bm25(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from chunkyard.pipeline.steps.bm25 import index_terms

        progress = step_progress(context.log, "chunks", "analysed")
        report = index_terms(postgres.store(), spec, owner=context.run.run_id, progress=progress)
        return materialize_result(context, report)

    @asset(**step_options(spec, "index"), kinds={"postgres"})
    def index(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from chunkyard.pipeline.steps.index import publish_index

        progress = step_progress(context.log, "phases", "published")
        report = publish_index(postgres.store(), spec, owner=context.run.run_id, progress=progress)
        return materialize_result(context, report)

    return [chunks, *parts, embeddings, bm25, index]


def embedding_part(spec: IndexSpec, k: int, n: int) -> AssetsDefinition:
    """Shard k of n of the embedding work; in the `embedding` pool only for a local model (a server's
    requests cost this machine little, so the parts against one run at once)."""
    options = index_asset_options(spec, "embeddings")
    options.update(
        key=AssetKey([*options["key"].path[:-1], f"embeddings_part{k}"]),
        description=f"Embedding cache filled for shard {k} of {n} of the staged chunks' content hashes",
        check_specs=None,
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
