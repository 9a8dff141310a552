"""Where a chunk sits in its source: page or slide numbers, the breaks inside it, and slides cut apart."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from chunkyard.chunking.types import LOCATION_KEYS, Document

# A slide with fewer non-blank characters than this (a bare title, "Questions?": about four words) is not a
# chunk of its own: it stays with the slide after it (or, when last, the one before it).
TINY_SLIDE_CHARS = 24
# The chunk metadata key listing where each later unit begins inside a chunk that crosses units:
# `page_breaks` / `slide_breaks`, absolute offsets into the document text (see `unit_at`).
BREAKS_SUFFIX = "_breaks"


def unit_span(starts: Sequence[int], start: int, end: int) -> tuple[int, int, list[int]]:
    """The 1-based numbers of the units holding a span's first and last character, and the start
    offsets of the units after the first one inside it (empty when the span is inside one unit)."""
    first = bisect.bisect_right(starts, start)
    last = bisect.bisect_right(starts, end - 1)
    return first, last, list(starts[first:last])


def unit_at(first: int, breaks: Sequence[int], offset: int) -> int:
    """The unit (page or slide) holding `offset` of a chunk starting in unit `first` with `breaks`."""
    return first + bisect.bisect_right(breaks, offset)


def slide_cuts(text: str, start: int, end: int, slide_starts: Sequence[int]) -> list[tuple[int, int]]:
    """A span cut at every slide start inside it, except where a side would be a tiny slide.

    A tiny slide stays with the slide after it; a tiny last slide stays with the one before it.
    """
    inner = [s for s in slide_starts[bisect.bisect_right(slide_starts, start) :] if s < end]
    cuts = [start]
    for boundary in inner:
        if boundary > cuts[-1] and _weight(text, cuts[-1], boundary) >= TINY_SLIDE_CHARS:
            cuts.append(boundary)
    if len(cuts) > 1 and _weight(text, cuts[-1], end) < TINY_SLIDE_CHARS:
        cuts.pop()
    return list(zip(cuts, [*cuts[1:], end], strict=True))


def _weight(text: str, start: int, end: int) -> int:
    return sum(1 for ch in text[start:end] if not ch.isspace())


def document_locations(doc: Document) -> list[tuple[list[int], tuple[str, str]]]:
    """(sorted start offsets, (first key, last key)) of each location list the document carries.

    A PDF's `page_starts` gives every chunk `page` / `page_end` (1-based), a deck's
    `slide_starts` gives `slide` / `slide_end`: the unit holding the chunk's first and last character.
    """
    out: list[tuple[list[int], tuple[str, str]]] = []
    for name, keys in LOCATION_KEYS.items():
        starts = doc.metadata.get(name) if doc.metadata else None
        if isinstance(starts, list) and starts and all(isinstance(v, int) for v in starts):
            out.append((sorted(starts), keys))
    return out


def location_parts(metadata: Mapping[str, Any]) -> list[str]:
    """Where a chunk is, in words, from its metadata: `pages 2-3`, `slide 4`, its heading path; [] when none is known."""
    parts = []
    for unit in ("page", "slide"):
        first, last = metadata.get(unit), metadata.get(f"{unit}_end")
        if first is not None:
            parts.append(f"{unit}s {first}-{last}" if last not in (None, first) else f"{unit} {first}")
    headings = [str(h) for h in metadata.get("heading_path") or [] if h]
    if headings:
        parts.append(" › ".join(headings))
    return parts
