"""Sentence spans and packing them up to a token budget: shared by the sentence-based strategies."""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import chain

import numpy as np
from chunkyard.chunking.spans import trim_span, window_pieces
from chunkyard.chunking.tokenizers import TokenUnits

_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "fig",
        "figs",
        "no",
        "nos",
        "vol",
        "al",
        "approx",
        "dept",
        "est",
        "inc",
        "ltd",
        "co",
        "corp",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "u.s",
        "u.k",
        "ph.d",
        "sra",
        "srta",
        "dra",
    ]
)

# A sentence ends at: Latin terminal punctuation (plus closing quotes/brackets) followed by
# whitespace; CJK / Arabic / Devanagari terminal punctuation anywhere (no space needed);
# a line break; or right before an inverted Spanish mark that follows terminal punctuation.
# The pattern starts with the set of characters a sentence end can start with, so the regex
# engine scans for them in C (a leading lookahead would make it try every position); each
# alternative then checks with a lookbehind which kind of character it started with.
_SENTENCE_END = re.compile(
    r"""
    [.!?…。！？｡؟۔।॥\r\n]
    (?:
      (?<=[.!?…])[.!?…]*[\"'”’»)\]]*(?:\s+|$)            # Latin-script sentence end + following space
    | (?<=[。！？｡؟۔।॥])[。！？｡؟۔।॥]*[\"'”’」』）)\]]*\s*  # CJK, Arabic, Urdu, Devanagari: no space needed
    | (?<=[.!?…])[.!?…]*(?=[¿¡])                          # "…fin.¿Qué?" : inverted mark opens the next one
    | (?<=\n)(?:[ \t]*\r?\n)*                               # line breaks
    | (?<=\r)\n(?:[ \t]*\r?\n)*
    )
    """,
    re.VERBOSE,
)


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Trimmed sentence spans of `text[start:end]` (constructive: from regex match ends)."""
    end = len(text) if end is None else end
    spans: list[tuple[int, int]] = []
    cur = start
    for m in _SENTENCE_END.finditer(text, start, end):
        cut = m.end()
        if cut <= cur:
            continue
        punct = text[m.start()]
        if punct == "." and _is_abbreviation(text, cur, m.start(), cut, end):
            continue
        s, e = trim_span(text, cur, cut)
        if e > s:
            spans.append((s, e))
        cur = cut
    if cur < end:
        s, e = trim_span(text, cur, end)
        if e > s:
            spans.append((s, e))
    return spans


def _is_abbreviation(text: str, sent_start: int, dot: int, cut: int, end: int) -> bool:
    """`Dr. Smith`, `e.g. this`, `J. Doe`, `3.5` are not sentence ends."""
    # next non-space char lowercase -> not a sentence end
    if cut < end:
        nxt = text[cut]
        if nxt.islower() or nxt.isdigit() or nxt in ",;:":
            return True
    tail = text[max(sent_start, dot - 12) : dot]
    if not tail or tail[-1].isspace():
        return False
    word = tail.rsplit(None, 1)[-1].lower()
    if word in _ABBREVIATIONS:
        return True
    return len(word) == 1 and word.isalpha()


def pack_spans(
    units: TokenUnits, spans: list[tuple[int, int]], budget: int, text: str | None = None
) -> list[tuple[int, int]]:
    """Greedily pack consecutive spans into chunks of at most `budget` tokens.

    A span longer than `budget` is cut into token windows on its own.
    """
    if not spans:
        return []
    arr = np.fromiter(chain.from_iterable(spans), dtype=np.int64, count=2 * len(spans)).reshape(-1, 2)
    first_unit = units.ends.searchsorted(arr[:, 0], side="right")
    after_unit = units.starts.searchsorted(arr[:, 1], side="left")
    cum = units.cum
    end_cum = cum[after_unit]
    start_cum = cum[np.minimum(first_unit, after_unit)]
    # +1 for an edge that cuts a token (see TokenUnits.estimate)
    n_units = len(units.starts)
    if n_units:
        partial_start = (units.starts[np.minimum(first_unit, n_units - 1)] < arr[:, 0]).astype(np.int64)
        partial_end = (units.ends[np.maximum(after_unit - 1, 0)] > arr[:, 1]).astype(np.int64)
    else:
        partial_start = partial_end = np.zeros(len(arr), dtype=np.int64)
    # the loop runs once per chunk: Python ints and bisect, not numpy scalars
    end_need = (end_cum + partial_end).tolist()
    start_need = (start_cum - partial_start).tolist()
    end_cum_list = end_cum.tolist()
    out: list[tuple[int, int]] = []
    i, n = 0, len(spans)
    while i < n:
        if end_need[i] - start_need[i] > budget:
            out.extend(window_pieces(units, spans[i][0], spans[i][1], budget - 2))
            i += 1
            continue
        # last j with end_need[j] - start_need[i] <= budget (end_cum is non-decreasing)
        j = bisect_right(end_cum_list, start_need[i] + budget) - 1
        j = max(j, i)
        while j > i and end_need[j] - start_need[i] > budget:
            j -= 1
        out.append((spans[i][0], spans[j][1]))
        i = j + 1
    if text is not None:
        out = [trim_span(text, s, e) for s, e in out]
        out = [(s, e) for s, e in out if e > s]
    return out
