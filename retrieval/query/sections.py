"""Small-to-big: each hit widened to its section (from its heading), within a cap of LLM tokens.

With `section_tokens: N` a search ranks the index's chunks as usual and returns, for each hit, the
span of its document from the nearest Markdown heading (`#` to `######`) before the chunk to the
next heading after it. A section longer than N tokens keeps the chunk's paragraphs (runs of text
between blank lines) and grows by whole paragraphs, after and before in turn, while it fits (a chunk
longer than N alone is kept as it is). A document without headings is one section, so its hits
grow by paragraphs. Hits whose sections overlap an earlier hit's are dropped (the ranking asks for
`SECTION_POOL` times k candidates so k sections remain). Every span is exact
(`text == document[start:end]`); the chunk that matched is kept as `metadata["matched_span"]`.
A document whose stored text no longer holds the chunk at its offsets (changed after the index
version was read) keeps the chunk as it was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from chunkyard.chunking.tokenizers import Tokenizer
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.settings.options import ResolvedSearch

SECTION_POOL = 3  # candidates ranked per result asked for: sections of neighbouring hits merge
_HEADING = re.compile(r"^#{1,6}[ \t]", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n[ \t]*\n\s*")
Span = tuple[int, int]
_OTHER = {"after": "before", "before": "after"}


def section_pool(plan: ResolvedSearch) -> int:
    """How many ranked hits `plan` widens to find its k sections (0 without `section_tokens`)."""
    return plan.k * SECTION_POOL if plan.section_tokens is not None else 0


def section_bounds(document: str, start: int) -> Span:
    """The heading section of `document` holding offset `start`: from its heading to the next one."""
    begin, end = 0, len(document)
    for match in _HEADING.finditer(document):
        if match.start() <= start:
            begin = match.start()
        else:
            end = match.start()
            break
    return begin, end


def paragraphs(document: str, bounds: Span) -> list[Span]:
    """The paragraphs (text between blank lines, stripped) of `document[bounds]`, in order."""
    lo, hi = bounds
    spans: list[Span] = []
    position = lo
    for match in [*_BLANK_LINES.finditer(document, lo, hi), None]:
        stop = match.start() if match is not None else hi
        piece = document[position:stop]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((position + lead, position + len(piece.rstrip())))
        if match is not None:
            position = match.end()
    return spans


def section_span(document: str, chunk: Span, max_tokens: int, tokenizer: Tokenizer) -> Span:
    """`chunk` widened to its section within `max_tokens` (see the module)."""
    start, end = chunk
    bounds = section_bounds(document, start)
    whole = paragraphs(document, bounds)
    if not whole:
        return chunk
    lo, hi = min(start, whole[0][0]), max(end, whole[-1][1])
    if tokenizer.count(document[lo:hi]) <= max_tokens:
        return lo, hi
    inside = [i for i, (s, e) in enumerate(whole) if s < end and e > start]
    if not inside:
        return chunk
    first, last = inside[0], inside[-1]
    lo, hi = min(start, whole[first][0]), max(end, whole[last][1])
    if tokenizer.count(document[lo:hi]) > max_tokens:
        return chunk
    grow = {"after": last + 1 < len(whole), "before": first > 0}
    side = "after"
    while grow["after"] or grow["before"]:
        if not grow[side]:
            side = _OTHER[side]
        i = last + 1 if side == "after" else first - 1
        s, e = (lo, whole[i][1]) if side == "after" else (whole[i][0], hi)
        if tokenizer.count(document[s:e]) <= max_tokens:
            lo, hi = s, e
            first, last = min(first, i), max(last, i)
            grow[side] = last + 1 < len(whole) if side == "after" else first > 0
        else:
            grow[side] = False
        side = _OTHER[side]  # alternate: the next paragraph after, then the one before
    return lo, hi


def widen_to_sections(
    results: Sequence[SearchResult],
    documents: Mapping[str, str],
    k: int,
    max_tokens: int,
    tokenizer: Tokenizer,
) -> list[SearchResult]:
    """The first `k` of `results` widened to their sections, a hit inside an earlier one's section dropped."""
    kept: list[SearchResult] = []
    taken: dict[str, list[Span]] = {}
    for result in results:
        if len(kept) == k:
            break
        document = documents.get(result.doc_id)
        chunk = (result.start, result.end)
        if document is None or document[result.start : result.end] != result.text:
            span = chunk
        else:
            span = section_span(document, chunk, max_tokens, tokenizer)
        if any(s < span[1] and span[0] < e for s, e in taken.get(result.doc_id, [])):
            continue
        taken.setdefault(result.doc_id, []).append(span)
        if span != chunk:
            assert document is not None
            result.metadata = {**(result.metadata or {}), "matched_span": [result.start, result.end]}
            result.start, result.end, result.text = span[0], span[1], document[span[0] : span[1]]
        result.rank = len(kept) + 1
        kept.append(result)
    return kept
