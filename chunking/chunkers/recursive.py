"""`recursive`: LangChain-style recursive splitting on separators, exact spans, one tokenization."""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate
from typing import Any

import numpy as np
from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.span_counts import refined_counts
from chunkyard.chunking.spans import DocText, Piece, trim_span
from chunkyard.chunking.tokenizers import TokenUnits

RECURSIVE_PRESETS: dict[str, dict[str, Any]] = {
    # paragraph, line, sentence ends, clause, word, token
    "default": {
        "separators": ["\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ", ""],
        "keep_separator": "end",
        "is_regex": False,
        "headings": True,
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
        "headings": True,
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
        "headings": True,
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

    With `headings` (the default, but not for code or the `chroma` preset, which reproduces
    LangChain), a piece that is only a Markdown heading line is joined to the piece after it, so a
    heading starts the chunk it titles: a chunk never ends with the next section's heading, and a
    heading never stands alone as a chunk.
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
        headings: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.headings = headings
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
        """Cut points of `[start, end)` by the first separator at or after `level` that occurs (no cut
        right after a heading, with `headings`)."""
        cuts, next_level = self._separator_cuts(dt, start, end, level)
        if self.headings and len(cuts) > 2 and dt.text.find("#", start, end) >= 0:
            cuts = _heading_cuts(dt.text, cuts)
        return cuts, next_level

    def _separator_cuts(self, dt: DocText, start: int, end: int, level: int) -> tuple[list[int], int]:
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


# A piece holding only ATX heading lines (`## Setup`; a heading and its first subheading), with the
# blank space around them.
_HEADING_PIECE = re.compile(r"\s*(?:#{1,6}[ \t]+\S[^\n]*(?:\n\s*|\Z))+")


def _heading_cuts(text: str, cuts: list[int]) -> list[int]:
    """`cuts` without those that would end a piece that is only a heading: the heading joins the
    piece after it (or, at the end of the span, the one before it)."""
    kept = [cuts[0]]
    last = len(cuts) - 1
    for i in range(1, last):
        a, b = kept[-1], cuts[i]  # the piece so far: a heading and blank pieces after it run on
        if text.find("#", a, b) >= 0 and _HEADING_PIECE.fullmatch(text, a, b):
            continue  # the heading piece runs on into the next one
        kept.append(cuts[i])
    if len(kept) > 1 and _HEADING_PIECE.fullmatch(text, kept[-1], cuts[last]):
        kept.pop()  # a span ending in a heading: it stays with the text before it
    kept.append(cuts[last])
    return kept


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


def _recursive_kwargs(options: dict, chunker: dict) -> dict:
    preset_name = options.get("preset") or "default"
    if preset_name not in RECURSIVE_PRESETS:
        raise ChunkerConfigError(
            f"chunker.preset: unknown {preset_name!r}; expected one of {', '.join(RECURSIVE_PRESETS)}"
        )
    preset = RECURSIVE_PRESETS[preset_name]
    separators = options.get("separators")
    if separators is None:
        separators = preset["separators"]
    elif (
        not isinstance(separators, list) or not all(isinstance(s, str) for s in separators) or not separators
    ):
        raise ChunkerConfigError(
            f"chunker.separators: expected a non-empty list of strings, got {separators!r}"
        )
    keep = options.get("keep_separator")
    keep = preset["keep_separator"] if keep is None else keep
    if keep is True:
        keep = "start"
    if keep not in ("start", "end"):
        raise ChunkerConfigError(f"chunker.keep_separator: expected 'start' or 'end', got {keep!r}")
    is_regex = options.get("is_regex")
    is_regex = preset["is_regex"] if is_regex is None else is_regex
    if not isinstance(is_regex, bool):
        raise ChunkerConfigError(f"chunker.is_regex: expected true or false, got {is_regex!r}")
    if is_regex:
        import re

        for s in separators:
            try:
                re.compile(s)
            except re.error as exc:
                raise ChunkerConfigError(f"chunker.separators: invalid regex {s!r}: {exc}") from exc
    exact = options.get("exact_lengths")
    exact = preset.get("exact_lengths", False) if exact is None else exact
    if not isinstance(exact, bool):
        raise ChunkerConfigError(f"chunker.exact_lengths: expected true or false, got {exact!r}")
    headings = options.get("headings")
    headings = preset.get("headings", False) if headings is None else headings
    if not isinstance(headings, bool):
        raise ChunkerConfigError(f"chunker.headings: expected true or false, got {headings!r}")
    return {
        "headings": headings,
        "separators": separators,
        "keep_separator": keep,
        "is_regex": is_regex,
        "preset": preset_name,
        "exact_lengths": exact,
    }


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    return RecursiveChunker(**_recursive_kwargs(options, chunker), **common)
