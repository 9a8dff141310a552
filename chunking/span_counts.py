"""Exact token counts of spans cut out of one tokenized document, re-encoding only the cut edges."""

from __future__ import annotations

import re

import numpy as np
from chunkyard.chunking.spans import DocText
from chunkyard.chunking.tokenizers import TokenUnits


def refined_counts(dt: DocText, starts: np.ndarray, ends: np.ndarray, overhead: int) -> np.ndarray:
    """Token counts of spans (without special tokens), exact at the edges.

    The interior comes from the document tokenization; an edge that cuts a token is
    re-encoded locally (the cut token plus a few following ones) because BPE/WordPiece
    may need more tokens for a word that lost its leading space.
    """
    units = dt.units
    n_units = len(units.starts)
    i = units.ends.searchsorted(starts, side="right")
    j = units.starts.searchsorted(ends, side="left")
    counts = np.maximum(units.cum[j] - units.cum[np.minimum(i, j)], 0)
    if n_units == 0:
        return counts
    partial_start = (j > i) & (units.starts[np.minimum(i, n_units - 1)] < starts)
    partial_end = (j > i) & (units.ends[np.maximum(j - 1, 0)] > ends)
    text, raw_count = dt.text, dt.tokenizer.count
    if getattr(dt.tokenizer, "name", "") not in ("chars", "words"):
        # a cut between two sub-word tokens of one word ("schl|umberger") re-tokenizes too
        n_text = len(text)
        partial_start |= np.array(
            [0 < p < n_text and text[p - 1 : p + 1].isalnum() for p in starts.tolist()], dtype=bool
        )
        partial_end |= np.array(
            [0 < p < n_text and text[p - 1 : p + 1].isalnum() for p in ends.tolist()], dtype=bool
        )
        partial_start &= j > i
        partial_end &= j > i
    todo = np.flatnonzero(partial_start | partial_end)
    if len(todo) == 0:
        return counts
    memo = dt.edge_counts

    def count(region: str) -> int:
        n = memo.get(region)
        if n is None:
            n = memo[region] = raw_count(region)
        return n

    cum = units.cum
    edge = 4
    t_list = todo.tolist()
    s_list = starts[todo].tolist()
    e_list = ends[todo].tolist()
    a_list = i[todo].tolist()
    b_list = j[todo].tolist()
    ps_list = partial_start[todo].tolist()
    pe_list = partial_end[todo].tolist()
    # unit offsets we may need, fetched in one vectorised step
    head_end = units.ends[np.minimum(i[todo] + edge, n_units) - 1].tolist()
    tail_start = units.starts[np.maximum(j[todo] - edge, 0)].tolist()
    head_cum = (cum[np.minimum(i[todo] + edge, n_units)] - cum[i[todo]]).tolist()
    tail_cum = (cum[j[todo]] - cum[np.maximum(j[todo] - edge, 0)]).tolist()
    out = counts.tolist()
    # cl100k: when a cut leaves only newlines of the first token, or only punctuation of the
    # last token right after a letter/digit, the pre-tokenizer pieces around the cut are the
    # same as in the document, so only the cut token itself needs re-encoding (memoised).
    shortcuts = getattr(dt.tokenizer, "name", "") == "cl100k"
    first_unit_end = units.ends[i[todo]].tolist() if shortcuts else []
    last_unit_start = units.starts[np.maximum(j[todo] - 1, 0)].tolist() if shortcuts else []
    first_w = (cum[i[todo] + 1] - cum[i[todo]]).tolist() if shortcuts else []
    last_w = (cum[j[todo]] - cum[np.maximum(j[todo] - 1, 0)]).tolist() if shortcuts else []
    n_text = len(text)
    for k, t in enumerate(t_list):
        s, e = s_list[k], e_list[k]
        ps, pe = ps_list[k], pe_list[k]
        if shortcuts and b_list[k] - a_list[k] >= 2:
            delta = 0
            if ps:
                ue = first_unit_end[k]
                rest = text[s:ue]
                if ue < n_text and not text[ue].isspace() and rest.strip("\r\n") == "":
                    delta += count(rest) - first_w[k]
                    ps = False
            if pe:
                us = last_unit_start[k]
                rest = text[us:e]
                if us > s and text[us - 1].isalnum() and not any(ch.isalnum() or ch.isspace() for ch in rest):
                    delta += count(rest) - last_w[k]
                    pe = False
            out[t] += delta
            if not ps and not pe:
                continue
        a, b = a_list[k], b_list[k]
        if b - a <= 2 * edge + 1:
            out[t] = count(text[s:e]) - overhead
            continue
        # The re-encoded region must end (start) outside any run of non-space characters,
        # or BPE/WordPiece could still merge across it: widen it to the nearest whitespace.
        head_idx, tail_idx = a + edge, b - edge
        if ps:
            he = head_end[k]
            if text[he - 1].isspace() or text[he].isspace():
                head_region = (he, head_cum[k])
            else:
                found = _unit_after_space(units, text, he, min(e, he + _MAX_WORD))
                head_idx = b if found is None or found >= b else found
                head_region = (
                    None if head_idx >= b else (int(units.starts[head_idx]), int(cum[head_idx] - cum[a]))
                )
        if pe:
            ts = tail_start[k]
            if text[ts].isspace() or text[ts - 1].isspace():
                tail_region = (ts, tail_cum[k])
            else:
                found = _unit_before_space(units, text, ts, max(s, ts - _MAX_WORD))
                tail_idx = a if found is None or found <= a else found
                tail_region = (
                    None if tail_idx <= a else (int(units.starts[tail_idx]), int(cum[b] - cum[tail_idx]))
                )
        overlapping = (ps and head_idx >= (tail_idx if pe else b)) or (pe and tail_idx <= a)
        if (ps and head_region is None) or (pe and tail_region is None) or overlapping:
            out[t] = count(text[s:e]) - overhead  # a long word at an edge: count the whole span
            continue
        if ps:
            out[t] += count(text[s : head_region[0]]) - overhead - head_region[1]
        if pe:
            out[t] += count(text[tail_region[0] : e]) - overhead - tail_region[1]
    return np.asarray(out, dtype=np.int64)


_MAX_WORD = 64
_SPACE_CHAR = re.compile(r"\s")


def _unit_after_space(units: TokenUnits, text: str, pos: int, limit: int) -> int | None:
    """Index of the first unit starting at or after the next whitespace in [pos, limit)."""
    m = _SPACE_CHAR.search(text, pos, limit)
    if m is None:
        return None
    return int(units.starts.searchsorted(m.start(), side="left"))


def _unit_before_space(units: TokenUnits, text: str, pos: int, limit: int) -> int | None:
    """Index of the unit holding the last whitespace before `pos` (not before `limit`)."""
    p = pos - 1
    while p >= limit and not text[p].isspace():
        p -= 1
    if p < limit:
        return None
    return int(units.ends.searchsorted(p, side="right"))
