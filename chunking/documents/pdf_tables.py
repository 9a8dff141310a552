"""Tables in PDF pages as Markdown tables (pdfplumber), the page's other text around them in order.

Only pages with enough drawn lines to hold a ruled table (pypdfium2 counts path objects: cheap) are
opened with pdfplumber; a table found (two rows and two columns at least) is written with
`chunking.documents.tables.markdown_table` at its place among the page's text lines, which come from
pdfplumber too for that page. A page without a ruled table is searched for tables aligned by whitespace
alone (`chunking.documents.pdf_text_tables`). The other pages keep the text they had.
"""

from __future__ import annotations

import io
from typing import Any

from chunkyard.chunking.documents.pdf_text_tables import Box, aligned_pages, pages_where, unruled_tables
from chunkyard.chunking.documents.tables import markdown_table

MIN_PATHS = 4  # drawn lines or boxes a page needs before it is searched for a ruled table


def _ruled_pages(data: bytes, count: int) -> list[int]:
    """Indexes of the pages with at least MIN_PATHS drawn lines or boxes."""
    import pypdfium2.raw as pdfium_c

    def ruled(page: Any) -> bool:
        paths = page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_PATH], max_depth=2)
        return sum(1 for _ in zip(range(MIN_PATHS), paths, strict=False)) >= MIN_PATHS

    return pages_where(data, count, ruled)


def pdf_table_pages(data: bytes, pages: list[str]) -> tuple[list[str], dict[str, Any]]:
    """`pages` with each page that holds a table re-read: lines and Markdown tables by position. Ruled
    tables first; a page without one is searched for unruled tables (`chunking.documents.pdf_text_tables`)."""
    ruled = _ruled_pages(data, len(pages))
    unruled = aligned_pages(data, len(pages))
    if not ruled and not unruled:
        return pages, {}
    import pdfplumber

    out, with_tables, counts = list(pages), [], {"ruled": 0, "unruled": 0}
    try:
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            for index in sorted({*ruled, *unruled}):
                page = pdf.pages[index]
                found: list[tuple[Box, list[list[str]]]] = []
                if index in ruled:
                    tables = [t for t in page.find_tables() if len(t.rows) >= 2 and len(t.columns) >= 2]
                    found = [(t.bbox, t.extract()) for t in tables]
                    counts["ruled"] += len(found)
                if not found and index in unruled:
                    found = unruled_tables(page)
                    counts["unruled"] += len(found)
                if not found:
                    continue
                outside = page
                for box, _ in found:
                    outside = outside.outside_bbox(box)
                items: list[tuple[float, str]] = [
                    (line["top"], line["text"]) for line in outside.extract_text_lines()
                ]
                items += [(box[1], "\n" + markdown_table(rows) + "\n") for box, rows in found]
                items.sort(key=lambda item: item[0])
                out[index] = "\n".join(text for _, text in items).strip()
                with_tables.append(index + 1)
    except Exception:  # pdfplumber on a file pypdf could read: keep pypdf's text
        return pages, {}
    if not with_tables:
        return pages, {}
    extra: dict[str, Any] = {"table_pages": with_tables, "tables": counts["ruled"] + counts["unruled"]}
    if counts["unruled"]:
        extra["unruled_tables"] = counts["unruled"]
    return out, extra
