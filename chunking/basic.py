"""The fast strategies: `token`, `recursive` and `sentence`.

All three tokenize the document once and cut with token-index arithmetic on the
resulting `TokenUnits`; no piece is ever re-encoded.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate, chain
from typing import Any

import numpy as np

from chunking.base import (
    BaseChunker,
    DocText,
    Piece,
    extend_overlap,
    refined_counts,
    trim_span,
    window_pieces,
)
from chunking.tokenizers import TokenUnits


class TokenChunker(BaseChunker):
    """Fixed windows of `size` tokens; `overlap` tokens shared by consecutive windows.

    Equivalent on spans to LangChain's `TokenTextSplitter` (windows start every
    `size - overlap` tokens; the last window is the first that reaches the end).
    """

    strategy = "token"

    def pieces(self, dt: DocText) -> list[Piece]:
        base = [Piece(s, e) for s, e in window_pieces(dt.units, 0, len(dt.text), self.base_budget)]
        return extend_overlap(base, dt.units, self.overlap, len(dt.text))  # windows stay untrimmed


# ---------------------------------------------------------------------------------------
# recursive

RECURSIVE_PRESETS: dict[str, dict[str, Any]] = {
    # paragraph, line, sentence ends, clause, word, token
    "default": {
        "separators": ["\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ", ""],
        "keep_separator": "end",
        "is_regex": False,
    },
    "markdown": {
        "separators": [
            r"\n#{1,6} ",
            r"```\n",
            r"\n\*\*\*+\n",
            r"\n---+\n",
            r"\n___+\n",
            r"\n\n",
            r"\n",
            r"(?<=[.!?]) ",
            " ",
            "",
        ],
        "keep_separator": "start",
        "is_regex": True,
    },
    "python": {
        "separators": ["\nclass ", "\ndef ", "\n    def ", "\n\tdef ", "\n\n", "\n", " ", ""],
        "keep_separator": "start",
        "is_regex": False,
    },
    "code": {
        "separators": [
            "\nclass ",
            "\nfunction ",
            "\nfunc ",
            "\nfn ",
            "\npub fn ",
            "\ninterface ",
            "\nconst ",
            "\nexport ",
            "\nif ",
            "\nfor ",
            "\nwhile ",
            "\n\n",
            "\n",
            " ",
            "",
        ],
        "keep_separator": "start",
        "is_regex": False,
    },
    "cjk": {
        "separators": ["\n\n", "\n", "。", "！", "？", "；", "，", "、", ". ", "! ", "? ", " ", ""],
        "keep_separator": "end",
        "is_regex": False,
    },
    # Chroma's report: RecursiveCharacterTextSplitter(separators=[...], cl100k length function);
    # LangChain keeps a separator at the start of the following piece.
    "chroma": {
        "separators": ["\n\n", "\n", ".", "?", "!", " ", ""],
        "keep_separator": "start",
        "is_regex": False,
        "exact_lengths": True,
    },
}


class RecursiveChunker(BaseChunker):
    """LangChain-style recursive splitting with exact spans and one tokenization.

    Splits on the first separator present, keeps pieces shorter than `size`, recurses
    into longer ones with the remaining separators, and merges neighbouring pieces up
    to `size` tokens. Overlap follows LangChain's merge: a new chunk starts with as many
    trailing pieces of the previous one as fit in `overlap` tokens. The empty separator
    means token units (never a cut inside a token).
    """

    strategy = "recursive"

    def __init__(
        self,
        *,
        separators: list[str],
        keep_separator: str = "end",
        is_regex: bool = False,
        preset: str = "",
        exact_lengths: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        # exact_lengths: count every piece as if encoded on its own (LangChain's length
        # function, needed to reproduce its boundaries); otherwise the document tokenization
        # plus one token per cut token edge, which is faster and almost always the same.
        self.exact_lengths = exact_lengths
        self.separators = list(separators)
        self.keep_separator = keep_separator
        self.preset = preset
        self._patterns = [
            None if s == "" else re.compile(s if is_regex else re.escape(s)) for s in self.separators
        ]
        self._literals = [None if is_regex else s for s in self.separators]  # str.find fast path

    def pieces(self, dt: DocText) -> list[Piece]:
        spans = self.split_span(dt, 0, len(dt.text))
        meta = {"preset": self.preset} if self.preset else {}
        return [Piece(s, e, dict(meta)) for s, e in spans]

    # The recursion works on (start, end) spans of the document; `level` indexes separators.
    # It runs breadth-first: all spans of one depth are cut and counted together (one numpy
    # call per depth instead of one per span), and each span's output is a list holding its
    # chunks and, in place, the lists of the spans it recursed into (flattened at the end).
    def split_span(
        self, dt: DocText, start: int, end: int, budget: int | None = None
    ) -> list[tuple[int, int]]:
        budget = self.budget if budget is None else budget
        if end <= start:
            return []
        root: list = []
        tasks: list[tuple[int, int, int, list]] = [(start, end, 0, root)]
        while tasks:
            tasks = self._split_depth(dt, tasks, budget)
        out: list[tuple[int, int]] = []
        _flatten(root, out)
        return out

    def _boundaries(self, dt: DocText, start: int, end: int, level: int) -> tuple[list[int], int]:
        """Cut points of `[start, end)` by the first separator at or after `level` that occurs."""
        text = dt.text
        for lv in range(level, len(self._patterns)):
            pattern = self._patterns[lv]
            if pattern is None:
                return self._unit_boundaries(dt.units, start, end), len(self._patterns)
            literal = self._literals[lv]
            if literal:
                if text.find(literal, start, end) >= 0:
                    return self._literal_cuts(text, start, end, literal), lv + 1
                continue
            if self.keep_separator == "end":
                cuts = [m.end() for m in pattern.finditer(text, start, end) if m.end() > m.start()]
            else:
                cuts = [m.start() for m in pattern.finditer(text, start, end) if m.end() > m.start()]
            if cuts:
                inner = [c for c in cuts if start < c < end]
                return [start, *inner, end], lv + 1
        return [start, end], len(self._patterns)

    def _literal_cuts(self, text: str, start: int, end: int, literal: str) -> list[int]:
        """`_boundaries` for a plain-string separator: repeated `str.find` gives the same matches
        as `finditer` (leftmost, non-overlapping), without a match object or a copy of the span."""
        find = text.find
        width = len(literal)
        shift = width if self.keep_separator == "end" else 0
        cuts: list[int] = []
        append = cuts.append
        p = find(literal, start, end)
        while p >= 0:
            append(p + shift)
            p = find(literal, p + width, end)
        if cuts and cuts[0] == start:  # a separator right at the start (kept at the start): no cut
            del cuts[0]
        if cuts and cuts[-1] == end:  # or right at the end (kept at the end)
            del cuts[-1]
        return [start, *cuts, end]

    @staticmethod
    def _unit_boundaries(units: TokenUnits, start: int, end: int) -> list[int]:
        i = units.first_unit_ending_after(start)
        j = units.units_starting_before(end)
        inner = units.starts[i:j]
        inner = inner[(inner > start) & (inner < end)]
        return [start, *inner.tolist(), end]

    def _split_depth(
        self, dt: DocText, tasks: list[tuple[int, int, int, list]], budget: int
    ) -> list[tuple[int, int, int, list]]:
        """Cut, count and merge every span of one recursion depth; returns the next depth's spans.

        A span's pieces under the budget are merged in runs (LangChain's `_merge_splits`); a
        piece over it recurses with the next separator, or at the last one is a chunk itself.
        Pieces are never empty: cuts are strictly inside a non-empty span and increasing.
        """
        text = dt.text
        n_patterns = len(self._patterns)
        starts: list[int] = []
        ends: list[int] = []
        spans: list[tuple[int, int, list]] = []  # (first piece, next level, output list)
        thresholds: list[int] = []  # a piece with more tokens than this does not merge
        sizes: list[int] = []
        for a, b, level, out in tasks:
            cuts, next_level = self._boundaries(dt, a, b, level)
            spans.append((len(starts), next_level, out))
            starts += cuts[:-1]
            ends += cuts[1:]
            sizes.append(len(cuts) - 1)
            thresholds.append(budget if next_level >= n_patterns else budget - 1)
        starts_arr = np.asarray(starts, dtype=np.int64)
        ends_arr = np.asarray(ends, dtype=np.int64)
        if self.exact_lengths:
            counts_arr = refined_counts(dt, starts_arr, ends_arr, 0)
        else:
            counts_arr = dt.units.estimate(starts_arr, ends_arr)
        over = np.flatnonzero(counts_arr > np.repeat(thresholds, sizes)).tolist()
        merge = _Merge(text, starts, ends, counts_arr, budget, self.overlap)
        over.append(len(starts))  # sentinel
        o = 0
        next_tasks: list[tuple[int, int, int, list]] = []
        for t, (first, next_level, out) in enumerate(spans):
            stop = first + sizes[t]
            i = first
            while True:
                k = over[o]
                if k >= stop:
                    break
                o += 1
                if k > i:
                    merge.run(i, k, out)
                i = k + 1
                if next_level >= n_patterns:
                    s, e = trim_span(text, starts[k], ends[k])
                    if e > s:
                        out.append((s, e))
                else:
                    child: list = []
                    out.append(child)
                    next_tasks.append((starts[k], ends[k], next_level, child))
            if stop > i:
                merge.run(i, stop, out)
        return next_tasks


def _flatten(items: list, out: list[tuple[int, int]]) -> None:
    """Chunks in document order from a span's output list (sub-lists are recursed spans)."""
    for item in items:
        if type(item) is list:
            _flatten(item, out)
        else:
            out.append(item)


class _Merge:
    """LangChain's `_merge_splits` on runs of consecutive pieces of one recursion depth.

    Pieces are contiguous, so a join is a span. `cum` (token prefix sums) and `last_with_tokens`
    are built once per depth; a run is an index range into them.
    """

    def __init__(
        self, text: str, starts: list[int], ends: list[int], counts: np.ndarray, budget: int, overlap: int
    ) -> None:
        self.text, self.starts, self.ends, self.counts = text, starts, ends, counts.tolist()
        self.budget, self.overlap = budget, overlap
        if overlap <= 0:
            self.cum = [0, *accumulate(self.counts)]
            with_tokens = np.where(counts > 0, np.arange(len(counts)), -1)
            self.last_with_tokens = np.maximum.accumulate(with_tokens).tolist()

    def run(self, i: int, m: int, out: list) -> None:
        if self.overlap > 0:
            self._run_with_overlap(i, m, out)
            return
        # One step per chunk (same spans as the per-piece loop): a chunk from piece `i` ends
        # before the first later piece that takes it over `budget` (every piece is within
        # `budget`); the next one starts after its last piece with tokens, so zero-token
        # pieces at its end open the next chunk too, as in the loop (a chunk always holds a
        # piece with tokens, else its next piece alone would be over `budget`).
        text, starts, ends, cum, budget = self.text, self.starts, self.ends, self.cum, self.budget
        last_with_tokens = self.last_with_tokens
        while i < m:
            u = bisect_right(cum, cum[i] + budget, i + 2, m + 1)  # first index past the chunk, in `cum`
            j = m - 1 if u > m else u - 2  # the chunk's last piece
            s, e = trim_span(text, starts[i], ends[j])
            if e > s:
                out.append((s, e))
            if u > m:
                return
            i = last_with_tokens[j] + 1

    def _run_with_overlap(self, i: int, m: int, out: list) -> None:
        """A new chunk starts with as many trailing pieces of the previous one as fit in `overlap`."""
        text, starts, ends, counts = self.text, self.starts, self.ends, self.counts
        budget, overlap = self.budget, self.overlap
        head = i  # index of the first live piece of the current chunk
        last = i - 1  # its last piece
        total = 0
        for k in range(i, m):
            n = counts[k]
            if total + n > budget and last >= head:
                s, e = trim_span(text, starts[head], ends[last])
                if e > s:
                    out.append((s, e))
                while total > overlap or (total + n > budget and total > 0):
                    total -= counts[head]
                    head += 1
            last = k
            total += n
        if last >= head:
            s, e = trim_span(text, starts[head], ends[last])
            if e > s:
                out.append((s, e))


# ---------------------------------------------------------------------------------------
# sentence

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


class SentenceChunker(BaseChunker):
    """Whole sentences packed up to `size` tokens; an over-long sentence is cut by tokens."""

    strategy = "sentence"

    def pieces(self, dt: DocText) -> list[Piece]:
        spans = sentence_spans(dt.text)
        packed = pack_spans(dt.units, spans, self.base_budget, dt.text)
        base = [Piece(s, e) for s, e in packed]
        return extend_overlap(base, dt.units, self.overlap, len(dt.text), dt.text)
