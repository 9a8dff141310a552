"""Checked values of a `chunker:` mapping shared by the registry and the strategies: sizes and overlap."""

from __future__ import annotations

from typing import Any

from chunkyard.chunking.base import ChunkerConfigError


def require_int(chunker: dict, key: str, default: Any, *, minimum: int = 1) -> int:
    value = chunker.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChunkerConfigError(f"chunker.{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ChunkerConfigError(f"chunker.{key}: must be >= {minimum}, got {value}")
    return value


def resolve_overlap(chunker: dict, size: int) -> int:
    """`overlap` is an int (tokens) or a float in [0, 1) (fraction of `size`)."""
    value = chunker.get("overlap", 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ChunkerConfigError(
            f"chunker.overlap: expected tokens (int) or a fraction (float), got {value!r}"
        )
    if isinstance(value, float):
        if not 0.0 <= value < 1.0:
            raise ChunkerConfigError(f"chunker.overlap: a fraction must be in [0, 1), got {value}")
        return int(round(value * size))
    if value < 0 or value >= size:
        raise ChunkerConfigError(f"chunker.overlap: must be >= 0 and < size ({size}), got {value}")
    return value
