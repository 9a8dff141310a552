"""`markdown` and `html`: split on headings, keep the heading path, never cut inside a
code fence, `<pre>` or a table while it fits, re-split long sections recursively.

Both scan the document once, collect sections (heading path + span) and inside each
section "blocks" (paragraphs, fenced code, tables, HTML block elements), then pack
blocks up to the token budget. A block that alone exceeds the budget is re-split: prose
recursively, code and tables at line (row) boundaries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from chunkyard.chunking.base import BaseChunker
from chunkyard.chunking.chunkers.recursive import RECURSIVE_PRESETS, RecursiveChunker
from chunkyard.chunking.sentences import pack_spans
from chunkyard.chunking.spans import DocText, Piece, extend_overlap, trim_span

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


@dataclass
class Block:
    start: int
    end: int
    atomic: bool = False  # code fence / table / <pre>: re-split only at line boundaries


@dataclass
class Section:
    start: int
    end: int
    heading_path: list[str]
    blocks: list[Block] = field(default_factory=list)


def iter_lines(text: str, start: int = 0, end: int | None = None):
    """(line_start, line_end_including_newline) for every line of text[start:end]."""
    end = len(text) if end is None else end
    pos = start
    while pos < end:
        m = _LINE.match(text, pos, end)
        if m is None or m.end() == pos:
            break
        yield pos, m.end()
        pos = m.end()


class _StructuredChunker(BaseChunker):
    """Packs blocks of each section; over-long blocks are re-split."""

    fallback_preset: dict[str, Any] = {**RECURSIVE_PRESETS["default"], "preset": "default"}

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        common = {"tokenizer": self.tokenizer, "size": self.size, "overlap": 0, "config_key": self.config_key}
        self._fallback = RecursiveChunker(**self.fallback_preset, **common)

    def sections(self, dt: DocText) -> list[Section]:
        raise NotImplementedError

    def pieces(self, dt: DocText) -> list[Piece]:
        out: list[Piece] = []
        budget = self.base_budget
        units = dt.units
        for section in self.sections(dt):
            spans: list[tuple[int, int]] = []
            for block in section.blocks:
                s, e = trim_span(dt.text, block.start, block.end)
                if e <= s:
                    continue
                if units.estimate_one(s, e) <= budget:
                    spans.append((s, e))
                elif block.atomic:
                    lines = [trim_span(dt.text, a, b) for a, b in iter_lines(dt.text, s, e)]
                    spans.extend(pack_spans(units, [(a, b) for a, b in lines if b > a], budget, dt.text))
                else:
                    spans.extend(self._fallback.split_span(dt, s, e, budget))
            meta = {"heading_path": list(section.heading_path)}
            out.extend(Piece(s, e, dict(meta)) for s, e in pack_spans(units, spans, budget, dt.text))
        return extend_overlap(out, units, self.overlap, len(dt.text), dt.text)
