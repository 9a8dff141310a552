"""A collection's `serve:` section: the promotion policy that points its alias at the leaderboard's best."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chunkyard.retrieval.settings.names import is_valid_name
from chunkyard.retrieval.settings.project import SettingsError

SERVE_KEYS = ("alias", "budget", "max_regression", "metric", "keep")
BUDGET_KEYS = ("p95_ms", "context_tokens", "chunks", "index_bytes")


@dataclass(frozen=True)
class PromotionPolicy:
    """A collection's `serve:` section: the alias the promotion asset points at its leaderboard's best
    (index config, variant) within `budget`, unless `metric` drops more than `max_regression` (a fraction)
    below the alias's current target. `keep`: earlier targets kept for rollback (None: the default)."""

    alias: str
    budget: dict[str, float] = field(default_factory=dict)
    max_regression: float = 0.02
    metric: str = "recall_at_{k}"
    keep: int | None = None


def read_promotion_policy(raw: Any, where: str) -> PromotionPolicy | None:
    """A collection entry's `serve:` value (None when absent), checked; errors name `where`.serve."""
    if raw is None:
        return None
    where = f"{where}.serve"
    if not isinstance(raw, dict) or "alias" not in raw or set(raw) - set(SERVE_KEYS):
        raise SettingsError(f"{where}: expected a mapping with `alias` and optional {list(SERVE_KEYS[1:])}")
    alias = raw["alias"]
    if not isinstance(alias, str) or not is_valid_name(alias) or "/" in alias:
        raise SettingsError(
            f"{where}.alias: must be lowercase letters, digits, '-', '_' or '.', got {alias!r}"
        )
    budget = raw.get("budget") or {}
    if not isinstance(budget, dict) or set(budget) - set(BUDGET_KEYS):
        raise SettingsError(f"{where}.budget: expected a mapping of {list(BUDGET_KEYS)}, got {budget!r}")
    for key, value in budget.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise SettingsError(f"{where}.budget.{key}: expected a positive number, got {value!r}")
    regression = raw.get("max_regression", 0.02)
    if isinstance(regression, bool) or not isinstance(regression, int | float) or not 0 <= regression <= 1:
        raise SettingsError(
            f"{where}.max_regression: expected a fraction between 0 and 1, got {regression!r}"
        )
    metric = raw.get("metric", "recall_at_{k}")
    if not isinstance(metric, str) or not metric:
        raise SettingsError(f"{where}.metric: expected a leaderboard metric name, got {metric!r}")
    keep = raw.get("keep")
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise SettingsError(f"{where}.keep: expected a positive integer, got {keep!r}")
    return PromotionPolicy(
        alias=alias,
        budget={key: float(value) for key, value in budget.items()},
        max_regression=float(regression),
        metric=metric,
        keep=keep,
    )
