"""PDF page text without its furniture: two-column pages read by column, repeated headers, footers and page
numbers dropped, words hyphenated across a line break joined.

`layout_pdf_pages(data, pages)` takes the text layer of each page (pypdf) and reads two-column pages by
column and tables as Markdown; `strip_furniture(pages)` then drops the furniture of all the file's
pages, text layer and OCR alike (`chunking.documents.binary.parse_pdf`), and joins hyphens. The
document text is built from these, so chunk spans stay exact against what is stored. A page
with a vertical gutter (no character crosses a band in the middle of the page on most lines) is read
again with pypdfium2's character boxes, left column before right; lines that cross the gutter
(a title, a header) stay where they are between the column blocks.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from chunkyard.chunking.documents.pdf_tables import pdf_table_pages

EDGE_LINES = 2  # lines at the top and at the bottom of a page looked at as possible furniture
MIN_PAGES = 3  # furniture is what repeats: a document needs this many pages to tell
REPEATED_SHARE = 0.5  # a line at the edge of at least this share of the pages is furniture
GUTTER_BINS = 100
Char = tuple[str, float, float, float, float]  # a character and its box: left, bottom, right, top
_PAGE_NUMBER = re.compile(
    r"^\s*(?:(?:page|p\.|seite|página|pagina|стор\.?|страница)\s*)?[-–—(]?\s*(?:\d{1,4}|[ivxlcdm]{1,6})"
    r"\s*[)–—-]?\s*(?:(?:of|/|de|von|из|з)\s*\d{1,4})?\s*$",
    re.IGNORECASE,
)
_HYPHENATED = re.compile(r"(\w)[-\u00ad]\n(?=[a-zà-ÿа-яё])")


def layout_pdf_pages(data: bytes, pages: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Each page's text read by column and with its tables as Markdown (`columns_pages`, `table_pages`)."""
    columns = _column_pages(data, len(pages))
    pages = [columns.get(i, text) for i, text in enumerate(pages)]
    # tables as Markdown (chunking.documents.pdf_tables): a page with one is read again around it (the
    # gap between two table columns may have looked like a gutter)
    pages, extra = pdf_table_pages(data, pages)
    read_by_column = sorted(i + 1 for i in columns if i + 1 not in extra.get("table_pages", ()))
    return pages, ({"columns_pages": read_by_column} if read_by_column else {}) | extra


def strip_furniture(pages: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The pages (text layer or OCR, all of one file) without repeated edge lines and page numbers,
    hyphens joined; and `furniture_lines_dropped` when any line was."""
    pages, dropped = drop_furniture(pages)
    return [join_hyphenated(text) for text in pages], (
        {"furniture_lines_dropped": dropped} if dropped else {}
    )


def _key(line: str) -> str:
    """A line as compared across pages: digits as `#` (a page number or a date changes), spaces squeezed."""
    return re.sub(r"\d+", "#", " ".join(line.split()).lower())


def _edges(lines: list[str]) -> dict[int, str]:
    """The first and last EDGE_LINES non-empty lines: {index: its place (`top0`, `top1`, `bottom0`, ...)}."""
    filled = [i for i, line in enumerate(lines) if line.strip()]
    places = {i: f"bottom{k}" for k, i in enumerate(reversed(filled[-EDGE_LINES:]))}
    places.update({i: f"top{k}" for k, i in enumerate(filled[:EDGE_LINES])})
    return places


def drop_furniture(pages: list[str]) -> tuple[list[str], int]:
    """`pages` without the lines found at the same edge place on most pages (digits may differ) and
    without page-number lines at an edge; and how many lines were dropped. Fewer than MIN_PAGES pages:
    page numbers only."""
    split = [text.splitlines() for text in pages]
    counts: Counter[tuple[str, str]] = Counter()
    for lines in split:
        counts.update({(place, _key(lines[i])) for i, place in _edges(lines).items()})
    needed = max(2, int(REPEATED_SHARE * len(pages) + 0.999))
    repeated = (
        {seen for seen, n in counts.items() if n >= needed and seen[1]} if len(pages) >= MIN_PAGES else set()
    )
    out, dropped = [], 0
    for lines in split:
        drop = {
            i
            for i, place in _edges(lines).items()
            if (place, _key(lines[i])) in repeated or _PAGE_NUMBER.match(lines[i])
        }
        dropped += len(drop)
        out.append("\n".join(line for i, line in enumerate(lines) if i not in drop).strip())
    return out, dropped


def join_hyphenated(text: str) -> str:
    """Words broken by a hyphen at a line end joined (`exam-\\nple` -> `example`); a hyphen before a
    capital or a digit (a name, a number range) is kept."""
    return _HYPHENATED.sub(r"\1", text)


def _column_pages(data: bytes, count: int) -> dict[int, str]:
    """{page index: text read column by column} of the pages that have two columns."""
    import pypdfium2 as pdfium

    found: dict[int, str] = {}
    try:
        pdf = pdfium.PdfDocument(data)
    except Exception:  # pypdf read it; a page pdfium cannot read keeps pypdf's text
        return found
    try:
        for index in range(min(count, len(pdf))):
            page = pdf[index]
            textpage = page.get_textpage()
            text = _read_columns(textpage, page.get_width())
            if text is not None:
                found[index] = text
    finally:
        pdf.close()
    return found


def _read_columns(textpage: Any, width: float) -> str | None:
    """The page's text left column first when it has a gutter, else None."""
    chars = []
    for i in range(textpage.count_chars()):
        ch = textpage.get_text_range(i, 1)
        if not ch or ch in "\r\n":
            continue
        left, bottom, right, top = textpage.get_charbox(i, loose=True)  # the font's line box
        chars.append((ch, left, bottom, right, top))
    ink = [c for c in chars if not c[0].isspace()]
    if len(ink) < 200:
        return None
    lines = _lines(chars)
    gutter = _gutter(lines, width)
    if gutter is None:
        return None
    blocks: list[str] = []
    left_part: list[str] = []
    right_part: list[str] = []
    for line in lines:
        ink_line = [c for c in line if not c[0].isspace()]
        if any(c[1] < gutter < c[3] for c in ink_line):  # a line across the gutter (title, header)
            blocks += [*left_part, *right_part, _text(line)]
            left_part, right_part = [], []
            continue
        left_side = [c for c in line if c[3] <= gutter]
        right_side = [c for c in line if c[1] >= gutter]
        if left_side and _text(left_side):
            left_part.append(_text(left_side))
        if right_side and _text(right_side):
            right_part.append(_text(right_side))
    blocks += [*left_part, *right_part]
    return "\n".join(blocks)


def _gutter(lines: list[list[Char]], width: float) -> float | None:
    """The x of a vertical band in the middle third of the page that at most a few lines cross (a title,
    a header) while most lines have text on both sides of it; None for a one-column page."""
    crossing = [0] * GUTTER_BINS
    for line in lines:
        covered: set[int] = set()
        for ch in line:
            if not ch[0].isspace():
                first = max(0, int(ch[1] / width * GUTTER_BINS))
                covered.update(range(first, min(GUTTER_BINS - 1, int(ch[3] / width * GUTTER_BINS)) + 1))
        for b in covered:
            crossing[b] += 1
    quiet = max(2, int(0.15 * len(lines)))
    empty = [b for b in range(GUTTER_BINS // 3, 2 * GUTTER_BINS // 3) if crossing[b] <= quiet]
    runs: list[list[int]] = []
    for b in empty:
        if runs and b == runs[-1][-1] + 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    if not runs or len(max(runs, key=len)) < 2:
        return None
    run = max(runs, key=len)
    x = (run[0] + run[-1] + 1) / 2 / GUTTER_BINS * width
    both = sum(1 for line in lines if any(c[3] <= x for c in line) and any(c[1] >= x for c in line))
    return x if both >= 0.5 * len(lines) else None


def _lines(chars: list[Char]) -> list[list[Char]]:
    """Characters grouped into lines by their vertical middle, top line first, each in reading order."""
    lines: list[list[Char]] = []
    middles: list[float] = []
    for ch in sorted(chars, key=lambda c: -(c[2] + c[4]) / 2):
        middle, height = (ch[2] + ch[4]) / 2, max(1.0, ch[4] - ch[2])
        if lines and abs(middles[-1] - middle) <= 0.5 * height:
            lines[-1].append(ch)
        else:
            lines.append([ch])
            middles.append(middle)
    return [sorted(line, key=lambda c: c[1]) for line in lines]


def _text(chars: list[Char]) -> str:
    """A line's characters left to right, a space where the gap between two is a third of their height."""
    out: list[str] = []
    previous = None
    for ch in chars:
        if ch[0].isspace():
            continue
        if previous is not None and ch[1] - previous[3] > 0.3 * max(1.0, ch[4] - ch[2]):
            out.append(" ")
        out.append(ch[0])
        previous = ch
    return "".join(out)
