"""`late`: late chunking (Günther et al., arXiv 2409.04701).

The document is embedded *before* it is chunked: the model reads a long window of
text, and each chunk's vector is the mean of the contextual token vectors inside the
chunk's span, so a chunk "knows" its surroundings (e.g. what "it" refers to). Chunk
boundaries come from a base strategy (`sentence`, `recursive` or `token`) at `size`
tokens; consecutive chunks are grouped into windows that fit the model's input limit
(`window` tokens, default: the model's `max_seq_length`); every window after the first
also reads `lookbehind` (a fraction of the window) of the preceding text as context,
without pooling it, as in the paper's "long late chunking". A chunk whose tokens were cut
off by the model (window longer than the model really accepts) starts the next window.
The vector is stored in `chunk.embedding`; the indexer uses it instead of embedding
`embed_text`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.chunkers.recursive import RECURSIVE_PRESETS, RecursiveChunker
from chunkyard.chunking.chunkers.sentence import SentenceChunker
from chunkyard.chunking.chunkers.token import TokenChunker
from chunkyard.chunking.fields import require_int
from chunkyard.chunking.spans import DocText, Piece
from chunkyard.chunking.types import Chunk


class LateChunker(BaseChunker):
    strategy = "late"
    caps_llm_tokens = False
    keeps_tables = False  # each piece's vector is pooled from the whole text's token embeddings

    def __init__(
        self,
        *,
        embedding_model: Any,
        base: str = "sentence",
        window: int | None = None,
        lookbehind: float = 0.25,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.embedding_model = embedding_model
        self.base = base
        self.window = window
        self.lookbehind = lookbehind
        common = {
            "tokenizer": self.tokenizer,
            "size": self.size,
            "overlap": self.overlap,
            "config_key": self.config_key,
        }
        if base == "recursive":
            self._base = RecursiveChunker(**RECURSIVE_PRESETS["default"], preset="default", **common)
        elif base == "token":
            self._base = TokenChunker(**common)
        else:
            self._base = SentenceChunker(**common)

    def pieces(self, dt: DocText) -> list[Piece]:
        return [Piece(p.start, p.end, {**p.metadata, "late_base": self.base}) for p in self._base.pieces(dt)]

    def window_limit(self) -> int:
        limit = self.window or int(getattr(self.embedding_model, "max_seq_length", 512))
        return max(1, limit - self.overhead)

    def finish(self, dt: DocText, pieces: list[Piece]) -> list[Chunk]:
        chunks = super().finish(dt, pieces)
        self.embed_late(dt, chunks)
        return chunks

    def embed_late(self, dt: DocText, chunks: list[Chunk]) -> None:
        """Set `chunk.embedding` for every chunk from windows of contextual token vectors."""
        text = dt.text
        limit = self.window_limit()
        units = dt.units
        i = 0
        window_id = 0
        while i < len(chunks):
            # text before the window's first chunk is read as context only (long late chunking)
            context_tokens = int(limit * self.lookbehind) if i > 0 else 0
            w_start = chunks[i].start
            if context_tokens:
                first = units.first_unit_ending_after(chunks[i].start)
                back = int(units.cum.searchsorted(units.cum[first] - context_tokens, side="left"))
                w_start = min(int(units.starts[min(back, len(units.starts) - 1)]), chunks[i].start)
            # greedy window of consecutive chunks that fits the limit together with the context
            j = i + 1
            while j < len(chunks) and units.estimate_one(w_start, chunks[j].end) <= limit:
                j += 1
            w_end = chunks[j - 1].end
            spans, vectors = self.embedding_model.embed_tokens(text[w_start:w_end])
            vectors = np.asarray(vectors, dtype=np.float32)
            token_spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2) + w_start
            done = i
            for k in range(i, j):
                c = chunks[k]
                mask = (token_spans[:, 0] < c.end) & (token_spans[:, 1] > c.start)
                if not mask.any():
                    break  # the model truncated the window before this chunk
                vec = vectors[mask].mean(axis=0)
                c.embedding = (vec / max(float(np.linalg.norm(vec)), 1e-12)).astype(np.float32)
                c.metadata["late_window"] = window_id
                done = k + 1
            if done == i:  # not even the first chunk got tokens: embed it on its own
                vec = np.asarray(self.embedding_model.embed([chunks[i].text]), dtype=np.float32)[0]
                chunks[i].embedding = vec
                chunks[i].metadata["late_window"] = window_id
                done = i + 1
            i = done
            window_id += 1


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    base = options["base"]
    if base not in ("recursive", "sentence", "token"):
        raise ChunkerConfigError(f"chunker.base: expected recursive, sentence or token, got {base!r}")
    window = options["window"]
    if window is not None:
        window = require_int(options, "window", 0, minimum=common["size"])
    lookbehind = options["lookbehind"]
    if isinstance(lookbehind, bool) or not isinstance(lookbehind, int | float) or not 0 <= lookbehind < 1:
        raise ChunkerConfigError(f"chunker.lookbehind: expected a fraction in [0, 1), got {lookbehind!r}")
    return LateChunker(embedding_model=em, base=base, window=window, lookbehind=float(lookbehind), **common)
