"""`token`: fixed windows of `size` tokens (with `overlap`), cut on the one tokenization."""

from __future__ import annotations

from typing import Any

from chunkyard.chunking.base import BaseChunker
from chunkyard.chunking.spans import DocText, Piece, extend_overlap, window_pieces


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


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    return TokenChunker(**common)
