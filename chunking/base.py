"""Shared machinery of every strategy: spans in, exact chunks out.

A strategy only decides *where* to cut (`Piece` spans, character offsets into the
document, `chunking.spans`). Everything else is common: the chunk text is always the document
slice, token counts come from one tokenization of the whole document (`chunking.span_counts`),
overlap is span arithmetic on the base pieces, and context enrichment only changes `embed_text`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from chunkyard.chunking.llm_cap import cap_pieces
from chunkyard.chunking.locations import BREAKS_SUFFIX, document_locations, slide_cuts, unit_span
from chunkyard.chunking.ocr_spans import ocr_span
from chunkyard.chunking.span_counts import refined_counts
from chunkyard.chunking.spans import DocText, Piece, char_windows, max_chunk_chars, trim_span, window_pieces
from chunkyard.chunking.table_rows import table_pieces
from chunkyard.chunking.tokenizers import Tokenizer, get_tokenizer, special_token_overhead
from chunkyard.chunking.types import Chunk, Document, as_document


class ChunkerConfigError(ValueError):
    """A `chunker:` mapping is invalid; the message names the bad field."""


ContextStep = Callable[[Document, list[Chunk]], None]


class BaseChunker:
    """Common implementation of `chunking.Chunker`; subclasses implement `pieces`."""

    strategy = "base"
    trims_whitespace = True
    keeps_tables = True  # off where pieces are linked to each other (parents, late chunking's vectors)
    caps_llm_tokens = True  # `max_llm_tokens` applies (off where pieces are linked, as above)

    def __init__(
        self,
        *,
        tokenizer: Tokenizer,
        size: int,
        overlap: int = 0,
        config_key: str = "",
        context: Iterable[ContextStep] = (),
        max_llm_tokens: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_llm_tokens = max_llm_tokens  # each chunk also within this many cl100k tokens
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
        if self.max_llm_tokens is not None and self.caps_llm_tokens:
            capped = cap_pieces(text, pieces, get_tokenizer("cl100k"), self.max_llm_tokens)
            if len(capped) != len(pieces):
                pieces, counts = self.enforce_limit(dt, capped)
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
