"""Markdown tables kept whole by every chunker: never cut inside a row, long tables split between rows.

`table_pieces` runs on a strategy's pieces before they are counted and finished: pieces are clipped
to the text outside tables, and each table (`chunking.documents.tables.table_spans`) becomes pieces of
whole rows that fit the token budget. The first piece holds the header row; each later piece's
`embed_prefix` is the header and separator lines, so the header is embedded and BM25-indexed with
every part while the chunk stays an exact span. Where every table already lies whole inside one piece,
the pieces are kept as they are (only marked). Table chunks carry `table: True` and
`table_part` / `table_parts`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from chunkyard.chunking.documents.tables import table_spans


class PieceLike(Protocol):
    start: int
    end: int
    metadata: dict[str, Any]
    embed_prefix: str


P = TypeVar("P", bound=PieceLike)
Count = Callable[[int, int], int]  # tokens of text[start:end]


def table_pieces(
    text: str, count: Count, pieces: Sequence[P], budget: int, make: Callable[..., P]
) -> list[P]:
    """`pieces` (a strategy's, of `text`) with every Markdown table taken out of them and chunked by rows
    within `budget` tokens as counted by `count`; `make(start, end, metadata, embed_prefix)` builds a
    piece (chunking.base.Piece)."""
    spans = table_spans(text)
    if not spans:
        return pieces
    if not any(start < edge < end for start, _, end in spans for p in pieces for edge in (p.start, p.end)):
        # every table lies whole inside a piece (or outside all): the pieces stand, marked
        for piece in pieces:
            if any(piece.start <= start and end <= piece.end for start, _, end in spans):
                piece.metadata["table"] = True
        return pieces
    out: list[P] = []
    for piece in pieces:
        segments = [(piece.start, piece.end)]
        for table_start, _, table_end in spans:
            if table_end <= piece.start or table_start >= piece.end:
                continue
            clipped: list[tuple[int, int]] = []
            for start, end in segments:
                if end <= table_start or start >= table_end:
                    clipped.append((start, end))
                    continue
                if start < table_start:
                    clipped.append((start, table_start))
                if end > table_end:
                    clipped.append((table_end, end))
            segments = clipped
        for start, end in segments:
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if end > start:
                out.append(make(start, end, dict(piece.metadata), piece.embed_prefix))
    for table_start, body_start, table_end in spans:
        # a table's pieces keep what the strategy said of the piece it was in (a heading path)
        around = next((p.metadata for p in pieces if p.start < table_end and p.end > table_start), {})
        for start, end, metadata, prefix in _row_groups(
            text, count, table_start, body_start, table_end, budget
        ):
            out.append(make(start, end, {**around, **metadata}, prefix))
    out.sort(key=lambda p: (p.start, p.end))
    return out


def _row_groups(
    text: str, count: Count, start: int, body_start: int, end: int, budget: int
) -> list[tuple[int, int, dict[str, Any], str]]:
    """One table as (start, end, metadata, embed prefix) of whole rows within `budget` tokens; the
    later groups' prefix is the header."""
    header = text[start:body_start]
    header_tokens = count(start, body_start)
    rows: list[tuple[int, int]] = []
    at = body_start
    while at < end:
        stop = text.find("\n", at, end)
        stop = end if stop < 0 else stop
        if stop > at:
            rows.append((at, stop))
        at = stop + 1
    groups: list[tuple[int, int]] = []
    group_start, used, previous_end = start, header_tokens, body_start
    for row_start, row_end in rows:
        cost = count(row_start, row_end) + 1
        if used + cost > budget and (group_start != start or used > header_tokens):
            groups.append((group_start, previous_end))
            group_start, used = row_start, header_tokens
        used += cost
        previous_end = row_end
    groups.append((group_start, rows[-1][1] if rows else end))
    return [
        (
            first,
            last,
            {"table": True, "table_part": part, "table_parts": len(groups)},
            "" if first == start else header,
        )
        for part, (first, last) in enumerate(groups, start=1)
    ]
