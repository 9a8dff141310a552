"""`html`: sections by heading tags, `<pre>` and tables whole while they fit, visible text embedded."""

from __future__ import annotations

import html as html_lib
import re
from html.parser import HTMLParser
from typing import Any

from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.chunkers._structured import Block, Section, _StructuredChunker
from chunkyard.chunking.spans import DocText, Piece

_BLOCK_TAGS = frozenset(
    [
        "p",
        "div",
        "section",
        "article",
        "aside",
        "header",
        "footer",
        "nav",
        "main",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "blockquote",
        "figure",
        "figcaption",
        "form",
        "fieldset",
        "details",
        "summary",
        "address",
        "hr",
        "br",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "table",
    ]
)
_ATOMIC_TAGS = frozenset({"pre", "table", "script", "style"})
_HEADING_TAGS = {f"h{i}": i for i in range(1, 7)}
_END_TAG = re.compile(r"</[^>]*>?")
_TAG = re.compile(r"<!--.*?-->|<(script|style)\b.*?</\1\s*>|<[^>]*>", re.DOTALL | re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_NEWLINE = re.compile("\n")


class _HtmlScanner(HTMLParser):
    """Collects headings, block starts and atomic regions with absolute offsets."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.text = text
        # HTMLParser counts lines by "\n" only
        self.line_starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
        self.cuts: list[int] = []
        self.headings: list[tuple[int, int, str]] = []  # (offset, level, title)
        self.atomic: list[tuple[int, int]] = []
        self._atomic_depth = 0
        self._atomic_start = 0
        self._atomic_tag = ""
        self._heading: tuple[int, int] | None = None
        self._heading_text: list[str] = []

    def _offset(self) -> int:
        line, col = self.getpos()
        return self.line_starts[line - 1] + col if line - 1 < len(self.line_starts) else len(self.text)

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        pos = self._offset()
        if self._atomic_depth:
            if tag == self._atomic_tag:
                self._atomic_depth += 1
            return
        if tag in _BLOCK_TAGS:
            self.cuts.append(pos)
        if tag in _ATOMIC_TAGS:
            self._atomic_depth, self._atomic_start, self._atomic_tag = 1, pos, tag
        if tag in _HEADING_TAGS:
            self._heading = (pos, _HEADING_TAGS[tag])
            self._heading_text = []

    def handle_endtag(self, tag: str) -> None:
        pos = self._offset()
        if self._atomic_depth and tag == self._atomic_tag:
            self._atomic_depth -= 1
            if self._atomic_depth == 0:
                m = _END_TAG.match(self.text, pos)
                end = m.end() if m else pos
                self.atomic.append((self._atomic_start, end))
                self.cuts.append(end)
            return
        if self._heading is not None and tag in _HEADING_TAGS:
            title = _SPACES.sub(" ", "".join(self._heading_text)).strip()
            self.headings.append((self._heading[0], self._heading[1], title))
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._heading is not None:
            self._heading_text.append(data)


def strip_tags(raw: str) -> str:
    """Visible text of an HTML fragment: tags, comments, scripts and styles removed."""
    return _SPACES.sub(" ", html_lib.unescape(_TAG.sub(" ", raw))).strip()


class HtmlChunker(_StructuredChunker):
    """Spans index the raw HTML; `embed_text` is its visible text when `strip_tags`."""

    strategy = "html"

    def __init__(self, *, strip_tags: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        self.strip_tags = strip_tags

    def sections(self, dt: DocText) -> list[Section]:
        text = dt.text
        scanner = _HtmlScanner(text)
        try:
            scanner.feed(text)
            scanner.close()
        except Exception:  # malformed markup: fall back to one section of paragraphs
            scanner.cuts, scanner.headings, scanner.atomic = [], [], []
        atomic_at = dict(scanner.atomic)
        # sections from headings
        bounds: list[tuple[int, list[str]]] = [(0, [])]
        stack: list[tuple[int, str]] = []
        for pos, level, title in scanner.headings:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            bounds.append((pos, [t for _, t in stack]))
        cuts = sorted({c for c in scanner.cuts if 0 < c < len(text)} | {b for b, _ in bounds if b > 0})
        sections: list[Section] = []
        for k, (start, path) in enumerate(bounds):
            end = bounds[k + 1][0] if k + 1 < len(bounds) else len(text)
            if end <= start and k + 1 < len(bounds):
                continue
            section = Section(start, end, path)
            points = [start, *[c for c in cuts if start < c < end], end]
            for a, b in zip(points, points[1:], strict=False):
                if b > a:
                    section.blocks.append(Block(a, b, atomic=a in atomic_at))
            sections.append(section)
        return sections

    def finish(self, dt: DocText, pieces: list[Piece]):
        chunks = super().finish(dt, pieces)
        if self.strip_tags:
            for c in chunks:
                visible = strip_tags(c.text)
                c.embed_text = visible or c.text
        return chunks


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    strip = options["strip_tags"]
    if not isinstance(strip, bool):
        raise ChunkerConfigError(f"chunker.strip_tags: expected true or false, got {strip!r}")
    return HtmlChunker(strip_tags=strip, **common)
