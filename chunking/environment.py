"""Settings read from the environment: one parser for whole numbers, errors that name the variable."""

from __future__ import annotations

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
