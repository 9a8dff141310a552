"""`sentence`: whole sentences packed up to `size` tokens; an over-long one is cut by tokens."""

from __future__ import annotations

from typing import Any

from chunkyard.chunking.base import BaseChunker
from chunkyard.chunking.sentences import pack_spans, sentence_spans
from chunkyard.chunking.spans import DocText, Piece, extend_overlap


class SentenceChunker(BaseChunker):
    """Whole sentences packed up to `size` tokens; an over-long sentence is cut by tokens."""

    strategy = "sentence"

    def pieces(self, dt: DocText) -> list[Piece]:
        spans = sentence_spans(dt.text)
        packed = pack_spans(dt.units, spans, self.base_budget, dt.text)
        base = [Piece(s, e) for s, e in packed]
        return extend_overlap(base, dt.units, self.overlap, len(dt.text), dt.text)


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    return SentenceChunker(**common)
