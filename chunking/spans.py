"""Spans over one tokenized document: the pieces a strategy chooses, and cutting them by tokens or characters.

Every chunk fits its limits in tokens *and* in characters (`max_chunk_chars`: 16 characters
per token of the chunk size, at least 512). A word the tokenizer maps to a single token (the
embedding model's WordPiece turns any word over 100 characters, e.g. a 20 KB hex dump, into
one `[UNK]`) is otherwise one giant chunk; such a span is cut by characters instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from chunkyard.chunking.tokenizers import Tokenizer, TokenUnits, token_units
from chunkyard.chunking.types import Document

# The character cap of a chunk: `max(MIN_CHUNK_CHARS, size * chars per token)`, e.g. 4,096
# characters at size 256. Sub-word tokens average about 4.5 characters in English prose and up to
# about 14 in whitespace-heavy code; a whitespace "word" (tokenizer `words`) up to about 40 (hashes,
# URLs). Only a span without usable token boundaries (one over-long word) ever reaches the cap.
MAX_CHARS_PER_TOKEN = 16
MAX_CHARS_PER_WORD = 64
MIN_CHUNK_CHARS = 512


def max_chunk_chars(tokenizer: Tokenizer, size: int) -> int:
    """Most characters a chunk of `size` tokens may hold (see MAX_CHARS_PER_TOKEN)."""
    per_token = MAX_CHARS_PER_WORD if getattr(tokenizer, "name", "") == "words" else MAX_CHARS_PER_TOKEN
    return max(MIN_CHUNK_CHARS, size * per_token)


@dataclass
class Piece:
    """A span chosen by a strategy, plus strategy-specific metadata."""

    start: int
    end: int
    metadata: dict[str, Any] = field(default_factory=dict)
    embed_prefix: str = ""


class DocText:
    """A document being chunked, tokenized at most once (lazily)."""

    def __init__(self, doc: Document, tokenizer: Tokenizer, units: TokenUnits | None = None) -> None:
        self.doc = doc
        self.text = doc.text
        self.tokenizer = tokenizer
        self._units = units  # given: a tokenization of this text made earlier
        self.edge_counts: dict[str, int] = {}  # memo of re-encoded edge regions

    @property
    def units(self) -> TokenUnits:
        if self._units is None:
            self._units = token_units(self.tokenizer, self.text)
        return self._units


def trim_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink a span so it neither starts nor ends with whitespace (like `str.strip`)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def window_pieces(units: TokenUnits, start: int, end: int, budget: int) -> list[tuple[int, int]]:
    """Cut `[start, end)` into consecutive windows of at most `budget` tokens on unit boundaries."""
    budget = max(1, budget)
    i = units.first_unit_ending_after(start)
    j_end = units.units_starting_before(end)
    if j_end <= i:
        return [(start, end)] if end > start else []
    cum = units.cum
    if cum[j_end] - cum[i] == j_end - i:  # every unit one token (e.g. ASCII text): no search needed
        cut_units = np.arange(i + budget, j_end, budget)
        cuts = [start, *units.ends[cut_units - 1].tolist(), end]
        return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    out: list[tuple[int, int]] = []
    cur_start = start
    while i < j_end:
        j = int(cum.searchsorted(cum[i] + budget, side="right")) - 1
        j = min(max(j, i + 1), j_end)
        cut = end if j >= j_end else int(units.ends[j - 1])
        if cut > cur_start:
            out.append((cur_start, cut))
        cur_start = cut
        i = j
    if cur_start < end and out:
        out[-1] = (out[-1][0], end)
    return out


def char_windows(units: TokenUnits, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """Cut `[start, end)` into windows of at most `max_chars` characters.

    Each cut falls on the last token-unit start inside the window; only inside a single unit
    longer than the window (one over-long word) is it a plain character position.
    """
    max_chars = max(1, max_chars)
    out: list[tuple[int, int]] = []
    cur = start
    while end - cur > max_chars:
        limit = cur + max_chars
        k = int(units.starts.searchsorted(limit, side="right")) - 1
        cut = int(units.starts[k]) if k >= 0 and units.starts[k] > cur else limit
        out.append((cur, cut))
        cur = cut
    if end > cur:
        out.append((cur, end))
    return out


def extend_overlap(
    pieces: list[Piece], units: TokenUnits, overlap: int, text_len: int, text: str | None = None
) -> list[Piece]:
    """Overlap as span arithmetic: extend each base piece forward by `overlap` tokens.

    Base pieces are cut at `size - overlap`, so an extended piece stays within `size`.
    A piece whose extension is contained in the previous one is dropped, which makes
    token windows identical to a stride of `size - overlap` (LangChain/Chroma).
    """
    if overlap <= 0 or not pieces:
        return pieces
    cum = units.cum
    out: list[Piece] = []
    for p in pieces:
        j = units.units_starting_before(p.end)
        # j: first unit starting at/after p.end -> units [j, k) are added
        k = int(cum.searchsorted(cum[j] + overlap, side="right")) - 1
        new_end = p.end
        if k > j:
            new_end = max(p.end, min(int(units.ends[k - 1]), text_len))
            if text is not None:  # do not end on whitespace
                new_end = max(p.end, trim_span(text, p.start, new_end)[1])
        if out and out[-1].start <= p.start and new_end <= out[-1].end:
            continue
        out.append(Piece(p.start, new_end, {**p.metadata, "overlap_end": p.end}, p.embed_prefix))
    return out
