"""A mean over questions with its bootstrap confidence interval, JSON-safe (NaN written as None)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """A mean over questions with its 95% (by default) percentile-bootstrap interval."""

    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | None]:
        """`{mean, ci_low, ci_high, n}`, JSON-safe: a NaN (no question scored) is written as None."""
        return {
            "mean": json_float(self.mean),
            "ci_low": json_float(self.low),
            "ci_high": json_float(self.high),
            "n": self.n,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, float | None]) -> Estimate:
        try:
            return cls(
                float_or_nan(data["mean"]),
                float_or_nan(data["ci_low"]),
                float_or_nan(data["ci_high"]),
                int(data["n"] or 0),
            )
        except KeyError as exc:
            raise ValueError(f"estimate: missing field {exc.args[0]!r} in {dict(data)!r}") from None


def json_float(value: float) -> float | None:
    """A float as JSON (and Postgres JSONB) can hold it: NaN and infinities become None."""
    value = float(value)
    return value if math.isfinite(value) else None


def float_or_nan(value: float | None) -> float:
    """The inverse of `json_float`: None reads back as NaN."""
    return math.nan if value is None else float(value)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """Percentile bootstrap over questions, seeded so reruns give the same interval."""
    data = np.asarray(values, dtype=np.float64)
    n = int(data.size)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = float(data.mean())
    if n == 1:
        return Estimate(mean, mean, mean, 1)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, 256):  # chunked: bounded memory for large question sets
        stop = min(n_resamples, start + 256)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = data[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return Estimate(mean, float(low), float(high), n)
