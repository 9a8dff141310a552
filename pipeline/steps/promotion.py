"""Step `promotion`: the leaderboard's best (config, variant) within the collection's budget, served by its alias.

Budget (`serve.budget`): p95 query latency (`p95_ms`), context tokens of the top k
(`context_tokens`, the leaderboard's `context_tokens_at_{k}`) and index size (`chunks`,
`index_bytes`); a row that lacks a budgeted measurement is out. The check `no_regression` blocks
the swap when the winner's `serve.metric` is more than `serve.max_regression` below the alias's
current target on the same leaderboard.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from chunkyard.evaluation.reports import Leaderboard, LeaderboardRow, leaderboard
from chunkyard.evaluation.runner import configured_reranker, latest_reports, variant_options
from chunkyard.pipeline.checks import Check
from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.query import aliases
from chunkyard.retrieval.settings.config import PromotionPolicy
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store import Store

# Bump when this module changes which target an alias is promoted to.
CODE_VERSION = "1"


@dataclass(frozen=True)
class Decision:
    """The promotion's outcome: the winner (None: nothing within budget) and what the check saw."""

    winner: LeaderboardRow | None
    metric: str
    winner_value: float
    current: aliases.AliasTarget | None
    current_value: float
    over_budget: dict[str, str]  # "index variant" -> the budget it exceeds
    blocked: bool


def measured(row: LeaderboardRow, key: str, k: int) -> float:
    """The row's value for one budget key (nan when not measured)."""
    if key == "p95_ms":
        return float(row.latency.get("p95_ms", math.nan))
    if key == "context_tokens":
        return row.value(f"context_tokens_at_{k}")
    return float(row.cost.get(key, math.nan))


def exceeded(row: LeaderboardRow, budget: dict[str, float], k: int) -> str | None:
    """The first budget the row breaks (or cannot show it keeps), or None."""
    for key, limit in budget.items():
        value = measured(row, key, k)
        if math.isnan(value):
            return f"{key}: not measured"
        if value > limit:
            return f"{key}: {value:g} > {limit:g}"
    return None


def decide(board: Leaderboard, policy: PromotionPolicy, current: aliases.AliasTarget | None) -> Decision:
    """The best row within budget by `serve.metric`, and whether it regresses against `current`."""
    metric = policy.metric.format(k=board.k)
    over: dict[str, str] = {}
    within = []
    for row in board.rows:
        broken = exceeded(row, policy.budget, board.k)
        if broken:
            over[f"{row.index} {row.variant}"] = broken
        elif not math.isnan(row.value(metric)):
            within.append(row)
    winner = max(within, key=lambda r: r.value(metric), default=None)
    winner_value = winner.value(metric) if winner is not None else math.nan
    current_value = math.nan
    if current is not None:  # its latest evaluation on this board, else what it scored when pinned
        current_value = float(current.scores.get(metric, math.nan))
        variant = current.options.mode  # the variant that runs just the alias's pinned mode
        for row in board.rows:
            if row.index == current.index and row.variant == variant and not math.isnan(row.value(metric)):
                current_value = row.value(metric)
    blocked = (
        winner is not None
        and not math.isnan(current_value)
        and current_value - winner_value > policy.max_regression
    )
    return Decision(winner, metric, winner_value, current, current_value, over, blocked)


def promote(
    store: Store, collection: str, index_names: Sequence[IndexName], policy: PromotionPolicy
) -> StepReport:
    """Point `serve.alias` at the leaderboard's winner unless nothing fits the budget or it regresses."""
    board = leaderboard(latest_reports(store, list(index_names)))
    current = aliases.get_alias(store, policy.alias)
    decision = decide(board, policy, current)
    report = StepReport(metadata={"alias": policy.alias, "metric": decision.metric, "collection": collection})
    if decision.over_budget:
        report.markdown["over_budget"] = "\n".join(
            f"- `{name}`: {why}" for name, why in sorted(decision.over_budget.items())
        )
    promoted = None
    winner = decision.winner
    if winner is None:
        report.warnings.append(f"promotion: no (config, variant) of {collection!r} is within the budget")
    elif not decision.blocked:
        # the options the winning variant was evaluated with (`served`: none, so the index's defaults)
        config = (store.indexes.info(winner.index) or {}).get("config") or {}
        options = variant_options(winner.variant, configured_reranker(config.get("rerank")))
        target = (IndexName.parse(winner.index), aliases.pinned_options(options))
        unchanged = (
            current is not None
            and (current.index, current.options) == target
            and current.current_version == current.pinned_version
        )
        promoted = current if unchanged else aliases.set_alias(
            store, policy.alias, winner.index, target[1], note=f"promoted: {decision.metric}",
            scores={decision.metric: decision.winner_value}, keep=policy.keep,
            actor="promotion", action="alias.promote",
        )  # fmt: skip
    report.metadata.update(
        {
            "promoted": promoted is not None,
            "winner": f"{winner.index} {winner.variant}" if winner else "",
            "winner_value": decision.winner_value,
            "current": f"{current.index} {current.options.mode}" if current else "",
            "current_value": decision.current_value,
        }
    )
    if promoted is not None:
        report.metadata.update({"generation": promoted.generation, "pinned_version": promoted.pinned_version})
    report.checks.append(
        Check(
            "no_regression",
            not decision.blocked,
            {
                "metric": decision.metric,
                "winner": decision.winner_value,
                "current": decision.current_value,
                "max_regression": policy.max_regression,
            },
        )
    )
    report.checks.append(
        Check("within_budget", winner is not None, {"over_budget": len(decision.over_budget)})
    )
    return report
