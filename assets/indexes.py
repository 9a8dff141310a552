"""Config-driven assets: every collection and every index its configs need becomes assets.

Per collection: `[collection, "documents"]` (folder or dataset -> Postgres) and, if it has
questions, `[collection, "leaderboard"]`. Per index (the specs of `load_index_specs`, coarse
companions included), in group `collection__config`: `chunks` -> `embeddings` + `bm25` ->
`index` (atomic publish) -> `evaluation` (for the configs the collection lists). Each asset calls
one `pipeline.steps` function and turns its `StepReport` into metadata and check results; the
checks run inside the asset that produced the data, so they always see this run's staged rows.

Nothing heavy is imported here: the code location loads without torch.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.checks import check_result, check_specs
from assets.resources import EmbedderResource, PostgresResource
from chunking.registry import needs_embedding_model
from evaluation.reports import ENDPOINT_COST_COLUMNS
from pipeline.report import StepReport
from pipeline.steps.evaluation import EVALUATION_K, evaluation_modes
from pipeline.versions import code_version, index_settings
from retrieval.config import CollectionConfig, IndexSpec, load_collection_configs, load_index_specs
from retrieval.names import IndexName

INDEX_KINDS = ("chunks", "embeddings", "bm25", "index")
ID_LIST_LIMIT = 50


@dataclass
class CollectionAssets:
    """The assets built for one collection, and the keys the sensor and CLI select."""

    collection: CollectionConfig
    assets: list[AssetsDefinition] = field(default_factory=list)
    documents_key: AssetKey | None = None
    # documents + chunks/embeddings/bm25/index of every index: what a document change re-runs.
    indexing_keys: list[AssetKey] = field(default_factory=list)
    evaluation_keys: list[AssetKey] = field(default_factory=list)
    leaderboard_key: AssetKey | None = None

    @property
    def keys(self) -> list[AssetKey]:
        return [k for a in self.assets for k in a.keys]


def safe_name(name: str) -> str:
    """A Dagster-legal name part: `recursive-256` -> `recursive_256`."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)
    return cleaned if not cleaned[:1].isdigit() else f"_{cleaned}"


def group_name(name: IndexName) -> str:
    return f"{safe_name(name.collection)}__{safe_name(name.config)}"


def index_key(name: IndexName, kind: str) -> AssetKey:
    return AssetKey([safe_name(name.collection), safe_name(name.config), kind])


def documents_key(collection: str) -> AssetKey:
    return AssetKey([safe_name(collection), "documents"])


def leaderboard_key(collection: str) -> AssetKey:
    return AssetKey([safe_name(collection), "leaderboard"])


def promotion_key(collection: str) -> AssetKey:
    return AssetKey([safe_name(collection), "promotion"])


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


def _description(spec: IndexSpec, kind: str) -> str:
    config = spec.config
    chunker = ", ".join(f"{k}={v}" for k, v in sorted(config.chunker.items()))
    what = {
        "chunks": "Chunk set (staged; only added/changed documents are re-chunked)",
        "embeddings": "Embeddings of the staged chunks (content-hash cache across configs and runs)",
        "bm25": "BM25 term frequencies of the staged chunks",
        "index": "Atomic publish of staged chunks, vectors and postings (readers see old or new)",
        "evaluation": f"hit@{EVALUATION_K}, MRR@{EVALUATION_K} and span metrics per retrieval mode",
    }[kind]
    return (
        f"{what} for index `{spec.name}`.\n\n{config.description or 'Index config ' + config.name}\n\n"
        f"chunker: {chunker}; model: {config.embedding_model}"
    )


def _config_metadata(spec: IndexSpec) -> dict[str, str]:
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


def build_documents_asset(collection: CollectionConfig) -> AssetsDefinition:
    name = collection.name
    source = (
        f"dataset `{collection.dataset}`"
        if collection.dataset
        else "folders " + ", ".join(f"`{f}`" for f in collection.folders)
    )
    settings = {
        "folders": collection.folders,
        "include": collection.include,
        "exclude": collection.exclude,
        "dataset": collection.dataset,
    }

    @asset(
        key=documents_key(name),
        group_name=safe_name(name),
        description=(
            f"Documents of collection `{name}` from {source}, hashed (sha256) and synced into Postgres."
            f"\n\n{collection.description}"
        ),
        code_version=code_version("documents", settings),
        kinds={"python", "postgres"},
        metadata={"collection": name, "source": source},
    )
    def documents(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from pipeline.steps.documents import sync_documents

        return materialize_result(context, sync_documents(postgres.store(), collection))

    return documents


def build_index_assets(
    collection: CollectionConfig, spec: IndexSpec, *, with_evaluation: bool
) -> list[AssetsDefinition]:
    """chunks -> embeddings + bm25 -> index (-> evaluation) for one index."""
    config = spec.config
    keys = {kind: index_key(spec.name, kind) for kind in (*INDEX_KINDS, "evaluation")}

    def common(kind: str, settings: dict | None = None) -> dict:
        settings = settings or index_settings(config, kind)
        return {
            "key": keys[kind],
            "group_name": group_name(spec.name),
            "description": _description(spec, kind),
            "code_version": code_version(kind, {"collection": spec.collection, **settings}),
            "metadata": _config_metadata(spec),
            "check_specs": check_specs(kind, keys[kind]),
        }

    chunk_options = {
        **common("chunks"),
        "deps": [documents_key(spec.collection)],
        "automation_condition": AutomationCondition.eager(),
        "kinds": {"python", "postgres"},
    }
    if needs_embedding_model(config.chunker):

        @asset(**chunk_options)
        def chunks(
            context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
        ) -> MaterializeResult:
            from pipeline.steps.chunks import chunk

            return materialize_result(context, chunk(postgres.store(), spec, embedder.for_config(config)))

    else:

        @asset(**chunk_options)
        def chunks(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
            from pipeline.steps.chunks import chunk

            return materialize_result(context, chunk(postgres.store(), spec))

    @asset(
        **common("embeddings"),
        deps=[keys["chunks"]],
        automation_condition=AutomationCondition.eager(),
        kinds={"pytorch", "pgvector"},
        pool="embedding",
    )
    def embeddings(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
    ) -> MaterializeResult:
        from pipeline.steps.embeddings import embed

        return materialize_result(context, embed(postgres.store(), spec, embedder.for_config(config)))

    @asset(
        **common("bm25"),
        deps=[keys["chunks"]],
        automation_condition=AutomationCondition.eager(),
        kinds={"python", "postgres"},
    )
    def bm25(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from pipeline.steps.bm25 import index_terms

        return materialize_result(context, index_terms(postgres.store(), spec))

    @asset(
        **common("index"),
        deps=[keys["embeddings"], keys["bm25"]],
        automation_condition=AutomationCondition.eager(),
        kinds={"postgres"},
    )
    def index(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from pipeline.steps.index import publish_index

        return materialize_result(context, publish_index(postgres.store(), spec))

    built = [chunks, embeddings, bm25, index]
    if not with_evaluation:
        return built
    settings = {"modes": evaluation_modes(config), "k": EVALUATION_K, **index_settings(config, "evaluation")}
    # an index with `coarse` answers ambiguous queries from its coarse index: evaluate after both
    coarse = [index_key(spec.name.sibling(config.coarse["config"]), "index")] if config.coarse else []

    @asset(
        **common("evaluation", settings),
        deps=[keys["index"], *coarse],
        # Re-evaluate when the index is republished, or when never evaluated.
        automation_condition=catches_up() | AutomationCondition.on_missing(),
        kinds={"python"},
    )
    def evaluation(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
    ) -> MaterializeResult:
        from pipeline.steps.evaluation import evaluate_collection_index

        # an embedding server's usage by the latest embedding step joins the report's cost
        embedded = context.instance.get_latest_materialization_event(keys["embeddings"])
        usage = embedded.asset_materialization.metadata if embedded and embedded.asset_materialization else {}
        cost = {k: float(v.value) for k, v in usage.items() if k in ENDPOINT_COST_COLUMNS}
        report = evaluate_collection_index(
            postgres.store(), collection, spec, embedder.for_config(config), cost=cost
        )
        return materialize_result(context, report)

    return [*built, evaluation]


def catches_up() -> AutomationCondition:
    """`eager()` reset only by its own requests, for assets only automation materializes.

    `eager()` also counts a materialization as handling a parent's update, so when an index is
    republished while its evaluation run is in flight (that run read the previous version), the
    run's own materialization hides the update and the evaluation stays stale. Here the update
    still stands after that run, and one more run is requested when it ends.
    """
    return (
        AutomationCondition.in_latest_time_window()
        & (AutomationCondition.newly_missing() | AutomationCondition.any_deps_updated()).since(
            AutomationCondition.newly_requested() | AutomationCondition.initial_evaluation()
        )
        & ~AutomationCondition.any_deps_missing()
        & ~AutomationCondition.any_deps_in_progress()
        & ~AutomationCondition.in_progress()
    ).with_label("eager, catching up with parents updated mid-run")


def build_leaderboard_asset(collection: CollectionConfig, specs: Sequence[IndexSpec]) -> AssetsDefinition:
    name = collection.name
    names = [spec.name for spec in specs]

    @asset(
        key=leaderboard_key(name),
        group_name=safe_name(name),
        description=f"Every index config of `{name}` compared on the same questions (table + chart).",
        code_version=code_version("leaderboard", {"collection": name, "indexes": names}),
        deps=[index_key(n, "evaluation") for n in names],
        automation_condition=catches_up(),
        kinds={"python"},
        metadata={"collection": name, "indexes": ", ".join(names)},
    )
    def leaderboard(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from pipeline.steps.leaderboard import write_leaderboard

        return materialize_result(context, write_leaderboard(postgres.store(), name, names))

    return leaderboard


def build_promotion_asset(collection: CollectionConfig, specs: Sequence[IndexSpec]) -> AssetsDefinition:
    """The leaderboard's winner within `serve.budget` served by `serve.alias` (blocked on a regression)."""
    name, serve = collection.name, collection.serve
    assert serve is not None
    names = [spec.name for spec in specs]
    key = promotion_key(name)

    @asset(
        key=key,
        group_name=safe_name(name),
        description=f"Points alias `{serve.alias}` at the best (config, mode) of `{name}` within its budget.",
        code_version=code_version("promotion", {"collection": name, "indexes": names, "serve": repr(serve)}),
        deps=[leaderboard_key(name)],
        automation_condition=catches_up(),
        check_specs=check_specs("promotion", key),
        kinds={"python"},
        metadata={"collection": name, "alias": serve.alias},
    )
    def promotion(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from pipeline.steps.promotion import promote

        return materialize_result(context, promote(postgres.store(), name, names, serve))

    return promotion


def build_collection_assets(collection: CollectionConfig, specs: Sequence[IndexSpec]) -> CollectionAssets:
    """The documents asset, every index's assets (companions too) and the leaderboard of one collection."""
    built = CollectionAssets(collection)
    docs = build_documents_asset(collection)
    built.assets.append(docs)
    built.documents_key = docs.key
    built.indexing_keys.append(docs.key)
    has_questions = bool(collection.dataset or collection.eval_set)
    listed = [spec for spec in specs if spec.config.name in collection.indexes]
    for spec in specs:
        evaluated = has_questions and spec in listed
        built.assets.extend(build_index_assets(collection, spec, with_evaluation=evaluated))
        built.indexing_keys.extend(index_key(spec.name, k) for k in INDEX_KINDS)
        if evaluated:
            built.evaluation_keys.append(index_key(spec.name, "evaluation"))
    if has_questions and listed:
        board = build_leaderboard_asset(collection, listed)
        built.assets.append(board)
        built.leaderboard_key = board.key
        if collection.serve is not None:
            built.assets.append(build_promotion_asset(collection, listed))
    return built


def build_all(
    indexes_path: str | Path | None = None, collections_path: str | Path | None = None
) -> dict[str, CollectionAssets]:
    """Assets for every collection of collections.yaml and every index `load_index_specs` returns."""
    specs = load_index_specs(indexes_path, collections_path)
    return {
        name: build_collection_assets(collection, [s for s in specs if s.collection == name])
        for name, collection in load_collection_configs(collections_path).items()
    }
