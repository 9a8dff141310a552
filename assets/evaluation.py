"""The assets that judge indexes: each index's evaluation, the collection's leaderboard, its promotion.

An index's `evaluation` follows its publish (and its coarse companion's); the `leaderboard`
compares every evaluated config of a collection; `promotion` points `serve.alias` at the winner
within budget, blocked by a regression. All three catch up with parents updated mid-run. The
evaluation and the leaderboard evaluate nothing when their inputs are those of their last run
(`assets.unchanged`).
"""

from collections.abc import Sequence

from chunkyard.assets.indexes import index_asset_options, part_kinds
from chunkyard.assets.keys import collection_prefix, index_key, leaderboard_key, promotion_key
from chunkyard.assets.progress import step_progress
from chunkyard.assets.resources import EmbedderResource, PostgresResource
from chunkyard.assets.results import check_specs, materialize_result
from chunkyard.assets.unchanged import inputs_version, unchanged_result, versioned
from chunkyard.evaluation.reports import ENDPOINT_COST_COLUMNS
from chunkyard.pipeline.checks import CHECKS
from chunkyard.pipeline.graph import PUBLISH
from chunkyard.pipeline.steps import evaluation as evaluation_step
from chunkyard.pipeline.steps import leaderboard as leaderboard_step
from chunkyard.pipeline.steps import promotion as promotion_step
from chunkyard.pipeline.steps.evaluation import EVALUATION_K, evaluation_variants
from chunkyard.pipeline.versions import code_version, config_settings
from chunkyard.retrieval.settings.config import Collection, IndexSpec
from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AutomationCondition,
    MaterializeResult,
    asset,
)


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


def build_evaluation_asset(collection: Collection, spec: IndexSpec) -> AssetsDefinition:
    """`[collection, config, "evaluation"]`: the collection's questions against one published index."""
    config = spec.config
    settings = {
        "variants": evaluation_variants(config),
        "k": EVALUATION_K,
        **config_settings(config, evaluation_step.SETTINGS),
    }
    # an index with `coarse` answers ambiguous queries from its coarse index: evaluate after both
    coarse = [index_key(spec.name.sibling(config.coarse["config"]), PUBLISH)] if config.coarse else []
    key = index_key(spec.name, "evaluation")
    what = (
        f"hit@{EVALUATION_K}, MRR@{EVALUATION_K} and span metrics per variant (search mode, reranked, served)"
    )
    declared = evaluation_step.CODE_VERSION

    @asset(
        **index_asset_options(
            spec,
            "evaluation",
            what,
            declared,
            settings,
            check_specs(CHECKS["evaluation"], key, blocking=False),
        ),
        deps=[index_key(spec.name, PUBLISH), *coarse],
        # Re-evaluate when the index is republished, or when never evaluated; never one whose
        # published checks failed.
        automation_condition=(catches_up() | AutomationCondition.on_missing())
        & AutomationCondition.all_deps_blocking_checks_passed(),
        kinds={"python"},
    )
    def evaluation(
        context: AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource
    ) -> MaterializeResult:
        from chunkyard.pipeline.evaluation_inputs import evaluation_inputs
        from chunkyard.pipeline.steps.evaluation import evaluate_collection_index

        store = postgres.store()
        version = inputs_version(context, evaluation_inputs(store, collection, spec))
        unchanged = unchanged_result(context, version, "the published index, the eval set and the settings")
        if unchanged is not None:
            return unchanged
        # an embedding server's usage by the latest embedding step (and its parts) joins the report's cost
        cost: dict[str, float] = {}
        for kind in ["embeddings", *part_kinds()]:
            embedded = context.instance.get_latest_materialization_event(index_key(spec.name, kind))
            usage = (
                embedded.asset_materialization.metadata if embedded and embedded.asset_materialization else {}
            )
            for name, value in usage.items():
                if name in ENDPOINT_COST_COLUMNS:
                    cost[name] = cost.get(name, 0.0) + float(value.value)
        progress = step_progress(context.log, "variants", "evaluated")  # counts, rate, time left in the log
        report = evaluate_collection_index(
            store, collection, spec, embedder.for_config(config), cost=cost, progress=progress
        )
        return versioned(materialize_result(context, report), version)

    return evaluation


def build_leaderboard_asset(collection: Collection, specs: Sequence[IndexSpec]) -> AssetsDefinition:
    """`[collection, "leaderboard"]`: every evaluated config of the collection on the same questions."""
    name = collection.name
    names = [spec.name for spec in specs]

    @asset(
        key=leaderboard_key(name),
        group_name=collection_prefix(name),
        description=f"Every index config of `{name}` compared on the same questions (table + chart).",
        code_version=code_version(
            "leaderboard", leaderboard_step.CODE_VERSION, {"collection": name, "indexes": names}
        ),
        deps=[index_key(n, "evaluation") for n in names],
        automation_condition=catches_up(),
        kinds={"python"},
        metadata={"collection": name, "indexes": ", ".join(names)},
    )
    def leaderboard(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from chunkyard.pipeline.evaluation_inputs import leaderboard_inputs
        from chunkyard.pipeline.steps.leaderboard import write_leaderboard

        store = postgres.store()
        version = inputs_version(context, leaderboard_inputs(store, names))
        unchanged = unchanged_result(context, version, "every index's latest evaluation")
        if unchanged is not None:
            return unchanged
        return versioned(materialize_result(context, write_leaderboard(store, name, names)), version)

    return leaderboard


def build_promotion_asset(collection: Collection, specs: Sequence[IndexSpec]) -> AssetsDefinition:
    """The leaderboard's winner within `serve.budget` served by `serve.alias` (blocked on a regression)."""
    name, policy = collection.name, collection.serve
    assert policy is not None
    names = [spec.name for spec in specs]
    key = promotion_key(name)

    @asset(
        key=key,
        group_name=collection_prefix(name),
        description=f"Points alias `{policy.alias}` at the best (config, variant) of `{name}` within its budget.",
        code_version=code_version(
            "promotion",
            promotion_step.CODE_VERSION,
            {"collection": name, "indexes": names, "serve": repr(policy)},
        ),
        deps=[leaderboard_key(name)],
        automation_condition=catches_up(),
        check_specs=check_specs(CHECKS["promotion"], key, blocking=False),
        kinds={"python"},
        metadata={"collection": name, "alias": policy.alias},
    )
    def promotion(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        from chunkyard.pipeline.steps.promotion import promote

        return materialize_result(context, promote(postgres.store(), name, names, policy))

    return promotion
