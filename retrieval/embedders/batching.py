"""Cutting a sequence into batches bounded both by count and by a token budget (embedding calls)."""

from __future__ import annotations

from collections.abc import Sequence


def budget_batches(sizes: Sequence[int], max_items: int, max_tokens: int) -> list[list[int]]:
    """Positions of `sizes`, in order, cut into runs of at most `max_items` items and `max_tokens`
    tokens; an item larger than the budget goes alone."""
    batches: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, n in enumerate(sizes):
        if current and (len(current) >= max_items or total + n > max_tokens):
            batches.append(current)
            current, total = [], 0
        current.append(i)
        total += n
    if current:
        batches.append(current)
    return batches
