"""`hierarchical`: small child chunks are indexed, each knowing its larger parent.

Parents are cut first (at `parent_size` tokens), then children inside each parent
(at `size`), so a child never straddles two parents. Each child carries
`metadata["parent_id"]` (the parent's stable chunk id) and the parent span
(`parent_start`, `parent_end`), which search can return to the generator instead of
the child.
"""

from __future__ import annotations

from typing import Any

from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.chunkers.recursive import RECURSIVE_PRESETS, RecursiveChunker
from chunkyard.chunking.fields import require_int
from chunkyard.chunking.sentences import pack_spans, sentence_spans
from chunkyard.chunking.spans import DocText, Piece, extend_overlap, window_pieces
from chunkyard.chunking.types import make_chunk_id


class HierarchicalChunker(BaseChunker):
    strategy = "hierarchical"
    caps_llm_tokens = False
    keeps_tables = False  # children are linked to their parents by span

    def __init__(self, *, parent_size: int = 1024, base: str = "recursive", **kw: Any) -> None:
        super().__init__(**kw)
        self.parent_size = parent_size
        self.base = base
        common = {"tokenizer": self.tokenizer, "overlap": 0, "config_key": self.config_key}
        self._parents = RecursiveChunker(
            **RECURSIVE_PRESETS["default"], preset="default", size=parent_size, **common
        )
        self._children = RecursiveChunker(
            **RECURSIVE_PRESETS["default"], preset="default", size=self.size, **common
        )

    def _split(
        self, dt: DocText, start: int, end: int, budget: int, splitter: RecursiveChunker
    ) -> list[tuple[int, int]]:
        if self.base == "recursive":
            return splitter.split_span(dt, start, end, budget)
        if self.base == "sentence":
            return pack_spans(dt.units, sentence_spans(dt.text, start, end), budget, dt.text)
        return window_pieces(dt.units, start, end, budget)

    def pieces(self, dt: DocText) -> list[Piece]:
        out: list[Piece] = []
        parent_budget = self._parents.budget
        parents = self._split(dt, 0, len(dt.text), parent_budget, self._parents)
        # a parent fits the character cap too (an over-long word is cut by characters)
        for parent in self._parents.split_long(dt, [Piece(s, e) for s, e in parents]):
            ps, pe = parent.start, parent.end
            parent_id = make_chunk_id(dt.doc.id, self.config_key + "#parent", ps, pe)
            meta = {"parent_id": parent_id, "parent_start": ps, "parent_end": pe}
            children = [
                Piece(s, e, dict(meta)) for s, e in self._split(dt, ps, pe, self.base_budget, self._children)
            ]
            # overlap stays inside the parent
            extended = extend_overlap(children, dt.units, self.overlap, pe, dt.text)
            out.extend(Piece(p.start, min(p.end, pe), p.metadata) for p in extended)
        return out


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    parent_size = require_int(options, "parent_size", 1024, minimum=8)
    if parent_size <= common["size"]:
        raise ChunkerConfigError(f"chunker.parent_size: {parent_size} must exceed size {common['size']}")
    base = options["base"]
    if base not in ("recursive", "sentence", "token"):
        raise ChunkerConfigError(f"chunker.base: expected recursive, sentence or token, got {base!r}")
    return HierarchicalChunker(parent_size=parent_size, base=base, **common)
