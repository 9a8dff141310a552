"""Highlights stage: the sentences of each hit that best match the query, their page or slide, a snippet.

Cheap by design (no model call, no SQL): the chunk's text is cut into sentences (and lines, so a
slide's bullets or a table's rows count alone), each sentence is analysed with the index's own BM25
analyzer, and a sentence scores the distinct query terms it holds, each weighted by its idf when the
index's in-memory BM25 copy is loaded (the service's case). The best sentence, joined
with a neighbour that adds query terms, is the first highlight; other sentences holding query terms
follow. A hit holding no query term (a dense-only match) gets no highlight and its snippet is the
chunk's start. The page or slide of a highlight comes from the chunk's `page`/`slide` and its
`page_breaks`/`slide_breaks` (`chunking.locations`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chunkyard.chunking.locations import BREAKS_SUFFIX, unit_at
from chunkyard.retrieval.store.bm25 import TermAnalyzer

MAX_HIGHLIGHTS = 3
SNIPPET_CHARS = 300  # the snippet's length around the first highlight (what the CLI shows)
# Inside a block, a sentence ends at . ! ? followed by whitespace, or after their CJK forms.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
_LINE_ENDS_CLAUSE = ".!?:;。！？"
_ITEM = re.compile(r"[-*+#|>]|\d+[.)]\s")
UNITS = ("page", "slide")


@dataclass(frozen=True)
class Highlight:
    """Text of one hit that matches the query: `start`/`end` are offsets in the document (inside the
    hit's span), `score` the distinct query terms it holds, `page`/`slide` where it is (when known)."""

    start: int
    end: int
    text: str
    score: float
    page: int | None = None
    slide: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Highlight:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every sentence of `text`, without surrounding whitespace.

    Lines are joined into blocks first: a line break is a soft wrap (a hard-wrapped paragraph keeps
    its sentences whole) unless a blank line, a line ending a clause (. ! ? : ;), a list item, heading,
    table row or quote on either side says otherwise (so a slide's bullets and a table's rows count alone).
    """
    spans: list[tuple[int, int]] = []
    for block_start, block_end in _blocks(text):
        position = block_start
        for match in [*_SENTENCE_END.finditer(text, block_start, block_end), None]:
            end = match.start() if match is not None else block_end
            piece = text[position:end]
            stripped = piece.strip()
            if stripped:
                lead = len(piece) - len(piece.lstrip())
                spans.append((position + lead, position + lead + len(stripped)))
            if match is not None:
                position = match.end()
    return spans


def _blocks(text: str) -> list[tuple[int, int]]:
    """Runs of lines joined across soft wraps (see `sentence_spans`)."""
    blocks: list[tuple[int, int]] = []
    start = 0
    previous = ""
    position = 0
    for line in text.splitlines(keepends=True):
        content = line.strip()
        if position and _hard_break(previous, content):
            blocks.append((start, position))
            start = position
        previous = content
        position += len(line)
    blocks.append((start, len(text)))
    return blocks


def _hard_break(before: str, after: str) -> bool:
    return (
        not before
        or not after
        or before[-1] in _LINE_ENDS_CLAUSE
        or before[0] in "#|"
        or _ITEM.match(after) is not None
    )


def locate(metadata: dict[str, Any], offset: int) -> dict[str, int]:
    """The page and/or slide holding document offset `offset` of a chunk with this metadata."""
    found: dict[str, int] = {}
    for unit in UNITS:
        first = metadata.get(unit)
        if isinstance(first, int):
            breaks = metadata.get(unit + BREAKS_SUFFIX) or []
            found[unit] = unit_at(first, breaks, offset) if isinstance(breaks, list) else first
    return found


def find_highlights(
    text: str,
    start: int,
    metadata: dict[str, Any],
    query_terms: set[str],
    analyzer: TermAnalyzer,
    weights: Mapping[str, float] | None = None,
) -> list[Highlight]:
    """The highlights of one chunk (`text` starting at document offset `start`), best first: a sentence
    scores the summed `weights` (the terms' idf; 1 each without) of the distinct query terms it holds."""
    if not query_terms:
        return []

    def score(terms: set[str]) -> float:
        return float(len(terms)) if weights is None else sum(weights.get(t, 0.0) for t in terms)

    spans = sentence_spans(text)
    held = [query_terms.intersection(analyzer.analyze(text[s:e])) for s, e in spans]
    scores = [score(terms) for terms in held]
    order = sorted((i for i in range(len(spans)) if held[i]), key=lambda i: (-scores[i], i))
    if not order:
        return []
    best = order[0]
    first, last, terms = best, best, set(held[best])
    for neighbour in (best - 1, best + 1):  # one neighbour that adds query terms joins the first
        if 0 <= neighbour < len(spans) and held[neighbour] - terms:
            first, last = min(first, neighbour), max(last, neighbour)
            terms |= held[neighbour]
            break
    windows: list[tuple[int, int, float]] = [(first, last, score(terms))]
    for i in order[1:]:
        if len(windows) == MAX_HIGHLIGHTS:
            break
        if not first <= i <= last:
            windows.append((i, i, scores[i]))
    out = []
    for a, b, value in windows:
        s, e = spans[a][0], spans[b][1]
        where = locate(metadata, start + s)
        out.append(
            Highlight(start + s, start + e, text[s:e], round(value, 4), where.get("page"), where.get("slide"))
        )
    return out


def snippet(text: str, start: int, highlight: Highlight | None, width: int = SNIPPET_CHARS) -> str:
    """About `width` characters of the chunk around its first highlight, or its start when the highlight is
    longer (whitespace collapsed; `...` where cut); the chunk's start without a highlight."""
    if highlight is None:
        lo, hi = 0, width
    else:
        a, b = highlight.start - start, highlight.end - start
        room = max(0, width - (b - a))  # a highlight longer than the snippet: its first `width` characters
        lo = max(0, a - room // 3)
        hi = lo + width
        lo = _word_start(text, lo)
    hi = _word_end(text, min(len(text), hi))
    body = " ".join(text[lo:hi].split())
    return ("..." if lo > 0 else "") + body + ("..." if hi < len(text) else "")


def _word_start(text: str, position: int) -> int:
    """`position` moved right to the start of a word (unless it is at one already)."""
    if position <= 0 or text[position - 1].isspace():
        return max(0, position)
    space = re.compile(r"\s").search(text, position)
    return space.end() if space is not None and space.end() - position < 20 else position


def _word_end(text: str, position: int) -> int:
    """`position` moved right to the end of the word it is in."""
    while 0 < position < len(text) and not text[position - 1].isspace() and not text[position].isspace():
        position += 1
    return position


def add_highlights(
    results: Sequence[Any],
    query_terms: Iterable[str],
    analyzer: TermAnalyzer,
    weights: Mapping[str, float] | None = None,
) -> None:
    """Set `highlights`, `snippet`, `page` and `slide` of each result (SearchResult) for the query's
    analysed terms, weighted by `weights` (see `find_highlights`)."""
    terms = set(query_terms)
    for result in results:
        metadata = result.metadata or {}
        found = find_highlights(result.text, result.start, metadata, terms, analyzer, weights)
        result.highlights = found
        result.snippet = snippet(result.text, result.start, found[0] if found else None)
        where = {"page": found[0].page, "slide": found[0].slide} if found else locate(metadata, result.start)
        result.page, result.slide = where.get("page"), where.get("slide")
