"""Shared machinery of every strategy: spans in, exact chunks out.

A strategy only decides *where* to cut (`Piece` spans, character offsets into the
document). Everything else is common: the chunk text is always the document slice,
token counts come from one tokenization of the whole document, overlap is span
arithmetic on the base pieces, and context enrichment only changes `embed_text`.

Every chunk fits its limits in tokens *and* in characters (`max_chunk_chars`: 16 characters
per token of the chunk size, at least 512). A word the tokenizer maps to a single token (the
embedding model's WordPiece turns any word over 100 characters, e.g. a 20 KB hex dump, into
one `[UNK]`) is otherwise one giant chunk; such a span is cut by characters instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from chunkyard.chunking.locations import BREAKS_SUFFIX, document_locations, slide_cuts, unit_span
from chunkyard.chunking.ocr_spans import ocr_span
from chunkyard.chunking.table_rows import table_pieces
from chunkyard.chunking.tokenizers import Tokenizer, TokenUnits, special_token_overhead, token_units
from chunkyard.chunking.types import Chunk, Document, as_document

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


class ChunkerConfigError(ValueError):
    """A chunker spec is invalid; the message names the bad field."""


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


ContextStep = Callable[[Document, list[Chunk]], None]


class BaseChunker:
    """Common implementation of `chunking.Chunker`; subclasses implement `pieces`."""

    strategy = "base"
    trims_whitespace = True
    keeps_tables = True  # off where pieces are linked to each other (parents, late chunking's vectors)

    def __init__(
        self,
        *,
        tokenizer: Tokenizer,
        size: int,
        overlap: int = 0,
        config_key: str = "",
        context: Iterable[ContextStep] = (),
    ) -> None:
        self.tokenizer = tokenizer
        self.size = size
        self.overlap = overlap
        self.config_key = config_key
        self.context_steps = list(context)
        self.overhead = special_token_overhead(tokenizer)
        self.budget = max(1, size - self.overhead)
        self.base_budget = max(1, self.budget - overlap)
        self.max_chars = max_chunk_chars(tokenizer, size)

    # -- to implement -------------------------------------------------------------------
    def pieces(self, dt: DocText) -> list[Piece]:
        raise NotImplementedError

    # -- public API ---------------------------------------------------------------------
    def chunk(self, document: Document | str) -> list[Chunk]:
        doc = as_document(document)
        if not doc.text or doc.text.isspace():
            return []
        dt = DocText(doc, self.tokenizer)
        pieces = self.pieces(dt)
        if self.keeps_tables:  # Markdown tables cut between rows only, header repeated (chunking.table_rows)
            pieces = table_pieces(dt.text, lambda s, e: dt.units.count(s, e), pieces, self.budget, Piece)
        chunks = self.finish(dt, pieces)
        for step in self.context_steps:
            step(doc, chunks)
        return chunks

    def chunk_batch(self, documents: Iterable[Document | str]) -> list[list[Chunk]]:
        return [self.chunk(d) for d in documents]

    # -- helpers ------------------------------------------------------------------------
    def limit_for(self, piece: Piece) -> int:
        return self.budget

    def enforce_limit(self, dt: DocText, pieces: list[Piece]) -> tuple[list[Piece], list[int]]:
        """Count every piece (exact edges) and re-cut the rare piece that is over its limit.

        A piece longer than `max_chars` characters is first cut by characters (`char_windows`).
        """
        pieces = self.split_long(dt, pieces)
        for _ in range(4):
            starts = np.fromiter((p.start for p in pieces), dtype=np.int64, count=len(pieces))
            ends = np.fromiter((p.end for p in pieces), dtype=np.int64, count=len(pieces))
            counts = refined_counts(dt, starts, ends, self.overhead).tolist()
            over = [k for k, p in enumerate(pieces) if counts[k] > self.limit_for(p)]
            if not over:
                return pieces, counts
            fixed: list[Piece] = []
            over_set = set(over)
            for k, p in enumerate(pieces):
                if k not in over_set:
                    fixed.append(p)
                    continue
                limit = self.limit_for(p)
                margin = max(1, min(8, limit // 4))
                windows = window_pieces(dt.units, p.start, p.end, max(1, limit - margin))
                if len(windows) <= 1:  # inside one over-long word: cut by characters, in proportion
                    parts = max(2, -(-counts[k] // max(1, limit - margin)))
                    windows = char_windows(dt.units, p.start, p.end, -(-(p.end - p.start) // parts))
                for s, e in windows:
                    s, e = trim_span(dt.text, s, e)
                    if e > s:
                        fixed.append(Piece(s, e, {**p.metadata, "recut": True}, p.embed_prefix))
            pieces = fixed
        return pieces, counts

    def cut_at_slides(self, dt: DocText, pieces: list[Piece]) -> list[Piece]:
        """A deck's pieces cut at its slide starts: each slide its own chunk unless tiny (`slide_cuts`)."""
        starts = dt.doc.metadata.get("slide_starts") if dt.doc.metadata else None
        if not isinstance(starts, list) or len(starts) < 2 or not all(isinstance(v, int) for v in starts):
            return pieces
        out: list[Piece] = []
        for p in pieces:
            for s, e in slide_cuts(dt.text, p.start, p.end, sorted(starts)):
                s, e = trim_span(dt.text, s, e)
                if e > s:
                    out.append(
                        p if (s, e) == (p.start, p.end) else Piece(s, e, dict(p.metadata), p.embed_prefix)
                    )
        return out

    def deck_title(self, doc: Document) -> tuple[str, int] | None:
        """A deck's title and its token count: carried by each of its chunks (metadata `deck_title`, and
        before the text that is embedded when the chunk stays within its budget)."""
        if not doc.title or not doc.metadata or "slide_starts" not in doc.metadata:
            return None
        return doc.title, self.tokenizer.count(doc.title)

    def split_long(self, dt: DocText, pieces: list[Piece]) -> list[Piece]:
        """Pieces of at most `max_chars` characters: longer ones cut by `char_windows`."""
        max_chars = self.max_chars
        if all(p.end - p.start <= max_chars for p in pieces):
            return pieces
        out: list[Piece] = []
        for p in pieces:
            if p.end - p.start <= max_chars:
                out.append(p)
                continue
            for s, e in char_windows(dt.units, p.start, p.end, max_chars):
                s, e = trim_span(dt.text, s, e)
                if e > s:
                    out.append(Piece(s, e, {**p.metadata, "recut": True}, p.embed_prefix))
        return out

    def finish(self, dt: DocText, pieces: list[Piece]) -> list[Chunk]:
        text = dt.text
        chunks: list[Chunk] = []
        if not pieces:
            return chunks
        pieces, counts = self.enforce_limit(dt, self.cut_at_slides(dt, pieces))
        locations = document_locations(dt.doc)
        deck_title = self.deck_title(dt.doc)
        for p, n_tokens in zip(pieces, counts, strict=True):
            if p.end <= p.start:
                continue
            chunk_text = text[p.start : p.end]
            if chunk_text.isspace():
                continue
            meta = {"strategy": self.strategy, **p.metadata} if p.metadata else {"strategy": self.strategy}
            for key, (first, last) in locations:
                meta[first], meta[last], breaks = unit_span(key, p.start, p.end)
                if breaks:  # the page or slide of any offset inside the chunk (`locations.unit_at`)
                    meta[first + BREAKS_SUFFIX] = breaks
            if "page" in meta:  # pages read by OCR: this chunk's (chunking.ocr_spans)
                meta.update(ocr_span(dt.doc.metadata, meta["page"], meta["page_end"]))
            if deck_title:
                meta["deck_title"] = deck_title[0]
                if not chunk_text.startswith(deck_title[0]) and n_tokens + deck_title[1] <= self.budget:
                    p = Piece(p.start, p.end, p.metadata, f"{deck_title[0]}\n\n{p.embed_prefix}")
            chunks.append(
                Chunk(
                    doc_id=dt.doc.id,
                    start=p.start,
                    end=p.end,
                    text=chunk_text,
                    token_count=int(n_tokens) + self.overhead,
                    metadata=meta,
                    embed_text=(p.embed_prefix + chunk_text) if p.embed_prefix else chunk_text,
                    config_key=self.config_key,
                )
            )
        return chunks
