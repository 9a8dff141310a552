"""`markdown`: sections by heading, heading path kept, fences and tables whole while they fit."""

from __future__ import annotations

import re
from typing import Any

from chunkyard.chunking.base import BaseChunker
from chunkyard.chunking.chunkers._structured import Block, Section, _StructuredChunker, iter_lines
from chunkyard.chunking.spans import DocText

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


_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*#*[ \t]*(?:\r\n|\r|\n)?$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_TABLE_LINE = re.compile(r" {0,3}\|")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*(?:\r\n|\r|\n)?$")


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


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    return MarkdownChunker(**common)
