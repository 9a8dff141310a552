"""Unruled PDF tables: columns aligned by whitespace alone, found with pdfplumber's text strategy.

A page is looked at only when pypdfium2's text rectangles show at least MIN_ROWS lines with a wide gap
inside them (cheap). pdfplumber's `text`
strategy then proposes tables from aligned words; it also swallows the prose around a table (cutting
its words at the proposed column edges), so only runs of MIN_ROWS rows or more where no word crosses a
column edge and at least two columns have a word are kept; each run is read again on its own and
kept when most of its cells are filled (`MIN_FILL`), and, for two columns, when its cells hold a few
words (key and value, not a two-column page of prose: `MAX_PAIR_CELL_WORDS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Box = tuple[float, float, float, float]  # x0, top, x1, bottom (pdfplumber's page coordinates)

TEXT_STRATEGY = {"vertical_strategy": "text", "horizontal_strategy": "text"}
MIN_ROWS = 3  # a header and two rows at least
WIDE_GAP = 1.5  # a gap inside a line wider than this many text heights separates two cells
MIN_FILL = 0.6  # share of the kept table's cells that hold text
MAX_PAIR_CELL_WORDS = 3.0  # a two-column table's mean words per cell at most (more: two columns of prose)
EDGE_SLACK = 1.0  # points a word may overhang a column edge without crossing it


def pages_where(data: bytes, count: int, keep: Callable[[Any], bool]) -> list[int]:
    """Indexes of the first `count` pages (pypdfium2's) for which `keep(page)` holds; [] when pdfium cannot read the file."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except Exception:  # pypdf read it; pdfium cannot: no tables then
        return []
    try:
        return [index for index in range(min(count, len(pdf))) if keep(pdf[index])]
    finally:
        pdf.close()


def aligned_pages(data: bytes, count: int) -> list[int]:
    """Indexes of the pages with at least MIN_ROWS lines holding a gap WIDE_GAP text heights wide."""
    return pages_where(data, count, _is_aligned)


def _is_aligned(page: Any) -> bool:
    textpage = page.get_textpage()
    lines: dict[int, list[tuple[float, float, float]]] = {}
    for i in range(textpage.count_rects()):
        left, bottom, right, top = textpage.get_rect(i)
        lines.setdefault(round((bottom + top) / 6), []).append((left, right, top - bottom))
    return sum(1 for segments in lines.values() if _has_wide_gap(segments)) >= MIN_ROWS


def _has_wide_gap(segments: list[tuple[float, float, float]]) -> bool:
    segments = sorted(segments)
    height = max(segment[2] for segment in segments)
    return any(b[0] - a[1] > WIDE_GAP * height for a, b in zip(segments, segments[1:], strict=False))


def unruled_tables(page: Any) -> list[tuple[Box, list[list[str]]]]:
    """The unruled tables of a pdfplumber page: (bounding box, rows, the first the header) each."""
    out: list[tuple[Box, list[list[str]]]] = []
    for proposed in page.find_tables(TEXT_STRATEGY):
        for box in _clean_runs(page, proposed):
            rows = _read_again(page, box)
            if rows:
                out.append((box, rows))
    return out


def _clean_runs(page: Any, table: Any) -> list[Box]:
    """The boxes of the runs of MIN_ROWS rows or more of `table` in which no word crosses a column edge
    and two columns at least have a word (rows without any word neither break nor count)."""
    columns = [column.bbox for column in table.columns]
    edges = [column[0] for column in columns[1:]]
    words = page.within_bbox(table.bbox).extract_words()
    runs: list[list[Box]] = [[]]
    for row in table.rows:
        x0, top, x1, bottom = row.bbox
        inside = [w for w in words if top <= (w["top"] + w["bottom"]) / 2 <= bottom]
        if not inside:
            continue
        crosses = any(
            w["x0"] < edge - EDGE_SLACK and w["x1"] > edge + EDGE_SLACK for w in inside for edge in edges
        )
        filled = sum(1 for c in columns if any(c[0] <= (w["x0"] + w["x1"]) / 2 <= c[2] for w in inside))
        if crosses or filled < 2:
            runs.append([])
        else:
            runs[-1].append(row.bbox)
    return [
        (min(b[0] for b in run), min(b[1] for b in run), max(b[2] for b in run), max(b[3] for b in run))
        for run in runs
        if len(run) >= MIN_ROWS
    ]


def _read_again(page: Any, box: Box) -> list[list[str]]:
    """The rows of the table inside `box` alone, without empty rows and columns; [] when it does not
    read as a table (too few rows or columns, too many empty cells, two columns of long text)."""
    x0, top, x1, bottom = box
    area = page.crop((max(0, x0 - 1), max(0, top - 1), min(page.width, x1 + 1), min(page.height, bottom + 1)))
    tables = area.find_tables(TEXT_STRATEGY)
    if not tables:
        return []
    table = max(tables, key=lambda t: len(t.rows) * len(t.columns))
    rows = [[" ".join((cell or "").split()) for cell in row] for row in table.extract()]
    rows = [row for row in rows if any(row)]
    keep = [
        i for i in range(max((len(row) for row in rows), default=0)) if any(i < len(r) and r[i] for r in rows)
    ]
    rows = [[row[i] if i < len(row) else "" for i in keep] for row in rows]
    cells = [cell for row in rows for cell in row]
    if len(rows) < MIN_ROWS or len(keep) < 2 or sum(1 for c in cells if c) < MIN_FILL * len(cells):
        return []
    if len(keep) == 2 and sum(len(c.split()) for c in cells) / len(cells) > MAX_PAIR_CELL_WORDS:
        return []
    return rows
