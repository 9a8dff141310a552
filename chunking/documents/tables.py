"""Tables as Markdown: a header row, its separator and one line per row, so a row never loses its header.

Every parser that finds a table (CSV, XLSX/ODS sheets, DOCX, ODT, PDF) writes it with
`markdown_table`; `table_spans` finds such tables again in a document's text, which is how the
chunkers keep rows whole and repeat the header (`chunking.table_rows`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MAX_CELL_CHARS = 2000  # one cell longer than this is cut (a sheet cell can hold 32k characters)
_SEPARATOR = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+\s*$")


def cell_text(value: object) -> str:
    """A cell as one line of Markdown: whitespace collapsed, `|` escaped, floats without a stray `.0`."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = " ".join(str(value).split())[:MAX_CELL_CHARS]
    return text.replace("\\", "\\\\").replace("|", "\\|")


def markdown_table(rows: Iterable[Sequence[object]]) -> str:
    """`rows` (the first one the header) as a Markdown table; empty rows and empty trailing columns are
    dropped, short rows padded. "" when no row has a value."""
    cells = [[cell_text(value) for value in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return ""
    width = max(max((i + 1 for i, value in enumerate(row) if value), default=0) for row in cells)
    cells = [(row + [""] * width)[:width] for row in cells]
    header, *body = cells
    lines = [_line(header), "|" + "|".join(" --- " for _ in header) + "|"]
    lines.extend(_line(row) for row in body)
    return "\n".join(lines)


def _line(row: Sequence[str]) -> str:
    return "| " + " | ".join(row) + " |"


def table_spans(text: str) -> list[tuple[int, int, int]]:
    """Every Markdown table in `text` as (start, end of its header and separator lines, end): character
    offsets, `end` after its last row. A table is a `|` line followed by a separator line (`| --- |`)."""
    spans: list[tuple[int, int, int]] = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    i = 0
    while i + 1 < len(lines):
        if lines[i].lstrip().startswith("|") and _SEPARATOR.match(lines[i + 1].strip()):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            end = offsets[j]
            while end > offsets[i] and text[end - 1] in "\r\n":
                end -= 1
            spans.append((offsets[i], offsets[i + 2], end))
            i = j
        else:
            i += 1
    return spans
