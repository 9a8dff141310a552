"""`markdown` and `html`: split on headings, keep the heading path, never cut inside a
code fence, `<pre>` or a table while it fits, re-split long sections recursively.

Both scan the document once, collect sections (heading path + span) and inside each
section "blocks" (paragraphs, fenced code, tables, HTML block elements), then pack
blocks up to the token budget. A block that alone exceeds the budget is re-split: prose
recursively, code and tables at line (row) boundaries.
"""

from __future__ import annotations

import html as html_lib
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from chunking.base import BaseChunker, DocText, Piece, extend_overlap, trim_span
from chunking.basic import RECURSIVE_PRESETS, RecursiveChunker, pack_spans

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*#*[ \t]*(?:\r\n|\r|\n)?$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_TABLE_LINE = re.compile(r" {0,3}\|")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*(?:\r\n|\r|\n)?$")


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


# Inside a long markdown paragraph or list: list items first, then lines, sentences, words.
_MARKDOWN_TEXT = {
    "separators": [
        r"\n\n",
        r"\n(?=[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t])",
        r"\n",
        r"(?<=[.!?])\s+",
        r"(?<=[;,])\s+",
        r"\s+",
        "",
    ],
    "keep_separator": "end",
    "is_regex": True,
    "preset": "markdown-text",
}


class MarkdownChunker(_StructuredChunker):
    strategy = "markdown"
    fallback_preset = _MARKDOWN_TEXT

    def sections(self, dt: DocText) -> list[Section]:
        text = dt.text
        sections: list[Section] = [Section(0, 0, [])]
        stack: list[tuple[int, str]] = []
        fence: str | None = None
        block_start: int | None = None
        block_kind = ""  # "para" | "table" | "fence"
        prev_line: tuple[int, int] | None = None  # the previous line if it alone opened a paragraph

        def close_block(end: int) -> None:
            nonlocal block_start, block_kind
            if block_start is not None and end > block_start:
                sections[-1].blocks.append(Block(block_start, end, atomic=block_kind in ("fence", "table")))
            block_start, block_kind = None, ""

        def open_section(start: int, level: int, title: str) -> None:
            sections[-1].end = start
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append(Section(start, start, [t for _, t in stack]))

        for ls, le in iter_lines(text):
            if fence is not None:
                m = _FENCE.match(text, ls, le)
                if (
                    m
                    and m.group(1)[0] == fence[0]
                    and len(m.group(1)) >= len(fence)
                    and not text[m.end() : le].strip()
                ):
                    fence = None
                    close_block(le)
                continue
            m = _FENCE.match(text, ls, le)
            if m:
                close_block(ls)
                fence = m.group(1)
                block_start, block_kind = ls, "fence"
                continue
            line_blank = text[ls:le].isspace() or ls == le
            if line_blank:
                close_block(ls)
                prev_line = None
                continue
            h = _ATX.match(text, ls, le)
            if h:
                close_block(ls)
                open_section(ls, len(h.group(1)), (h.group(2) or "").strip())
                sections[-1].blocks.append(Block(ls, le))
                prev_line = None
                continue
            u = _SETEXT.match(text, ls, le)
            if u and prev_line is not None and block_kind == "para" and block_start == prev_line[0]:
                # "Title\n=====" (level 1) or "Title\n-----" (level 2): the previous line is the heading
                block_start, block_kind = None, ""
                title_start, title_end = prev_line
                open_section(
                    title_start, 1 if u.group(1)[0] == "=" else 2, text[title_start:title_end].strip()
                )
                sections[-1].blocks.append(Block(title_start, le))
                prev_line = None
                continue
            is_table = _TABLE_LINE.match(text, ls, le) is not None
            kind = "table" if is_table else "para"
            if block_start is not None and block_kind != kind:
                close_block(ls)
            prev_line = None
            if block_start is None:
                block_start, block_kind = ls, kind
                prev_line = (ls, le)
        close_block(len(text))
        sections[-1].end = len(text)
        return [s for s in sections if s.blocks]


# ---------------------------------------------------------------------------------------
# html

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
