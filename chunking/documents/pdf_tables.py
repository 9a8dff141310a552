"""Ruled tables in PDF pages as Markdown tables (pdfplumber), the page's other text around them in order.

Only pages with enough drawn lines to hold a ruled table (pypdfium2 counts path objects: cheap) are
opened with pdfplumber; a table found (two rows and two columns at least) is written with
`chunking.documents.tables.markdown_table` at its place among the page's text lines, which come from
pdfplumber too for that page. The other pages keep the text they had.
"""

from __future__ import annotations

import io
from typing import Any

from chunkyard.chunking.documents.tables import markdown_table

MIN_PATHS = 4  # drawn lines or boxes a page needs before it is searched for a ruled table


def _ruled_pages(data: bytes, count: int) -> list[int]:
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        pdf = pdfium.PdfDocument(data)
    except Exception:  # pypdf read it; pdfium cannot: no tables then
        return []
    try:
        found = []
        for index in range(min(count, len(pdf))):
            paths = pdf[index].get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_PATH], max_depth=2)
            if sum(1 for _ in zip(range(MIN_PATHS), paths, strict=False)) >= MIN_PATHS:
                found.append(index)
        return found
    finally:
        pdf.close()


def pdf_table_pages(data: bytes, pages: list[str]) -> tuple[list[str], dict[str, Any]]:
    """`pages` with each page that holds a ruled table re-read: lines and Markdown tables by position."""
    ruled = _ruled_pages(data, len(pages))
    if not ruled:
        return pages, {}
    import pdfplumber

    out, with_tables, tables = list(pages), [], 0
    try:
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            for index in ruled:
                page = pdf.pages[index]
                found = [t for t in page.find_tables() if len(t.rows) >= 2 and len(t.columns) >= 2]
                if not found:
                    continue
                outside = page
                for table in found:
                    outside = outside.outside_bbox(table.bbox)
                items: list[tuple[float, str]] = [
                    (line["top"], line["text"]) for line in outside.extract_text_lines()
                ]
                items += [(table.bbox[1], "\n" + markdown_table(table.extract()) + "\n") for table in found]
                items.sort(key=lambda item: item[0])
                out[index] = "\n".join(text for _, text in items).strip()
                with_tables.append(index + 1)
                tables += len(found)
    except Exception:  # pdfplumber on a file pypdf could read: keep pypdf's text
        return pages, {}
    return out, ({"table_pages": with_tables, "tables": tables} if with_tables else {})
