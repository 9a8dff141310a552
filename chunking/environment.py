"""Settings read from the environment: one parser for whole numbers, one for numbers, errors that name the variable."""

from __future__ import annotations

import math
import os


class EnvironmentSettingError(ValueError):
    """An environment variable holds no usable value; the message names the variable."""


def env_int(name: str, default: int | None, *, minimum: int = 1, unit: str = "an integer") -> int | None:
    """`name` as a whole number of at least `minimum`, or `default` when it is unset or blank."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvironmentSettingError(f"{name}: expected {unit}, got {raw!r}") from None
    if value < minimum:
        raise EnvironmentSettingError(f"{name}: must be at least {minimum}, got {value}")
    return value


def env_float(
    name: str,
    default: float,
    *,
    minimum: float = 0.0,
    above_minimum: bool = False,
    maximum: float | None = None,
    unit: str = "a number",
) -> float:
    """`name` as a finite number from `minimum` (excluded when `above_minimum`) to `maximum`, or
    `default` when it is unset or blank."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise EnvironmentSettingError(f"{name}: expected {unit}, got {raw!r}") from None
    low_ok = value > minimum if above_minimum else value >= minimum
    if not (math.isfinite(value) and low_ok and (maximum is None or value <= maximum)):
        low = f"more than {minimum:g}" if above_minimum else f"at least {minimum:g}"
        high = "" if maximum is None else f" and at most {maximum:g}"
        raise EnvironmentSettingError(f"{name}: must be {low}{high}, got {raw}")
    return value
