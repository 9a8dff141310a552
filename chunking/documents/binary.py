"""PDF, DOCX and PPTX files' text, title and page or slide offsets; an unusable file raises UnusableFile.

Each parser returns the document text (what chunk spans index into), a title and extra metadata.
These formats (and HTML, `chunking.documents.webpage`) build their text from blocks joined by blank
lines, so offsets are offsets into that extracted text; PDF pages and PPTX slides are located by
`page_starts` / `slide_starts` (start offset of each, see `chunking.types.LOCATION_KEYS`).
Parsers of untrusted input can fail in any way: every failure becomes an UnusableFile whose
message names the format and the parser's error.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.furniture import drop_furniture, layout_pdf_pages, strip_furniture
from chunkyard.chunking.documents.parse_bounds import bound_hit
from chunkyard.chunking.documents.scanned import IMAGE_FORMATS, parse_image, read_scanned_pdf_pages
from chunkyard.chunking.documents.tables import markdown_table

Parsed = tuple[str, str, dict[str, Any]]  # (text, title, extra metadata)

# Office files are zip archives of XML: refuse archives that would inflate past this (zip bombs).
MAX_UNZIPPED_BYTES = 256 * 1024 * 1024
MAX_ZIP_ENTRIES = 10_000


def join_blocks(blocks: Iterable[str]) -> tuple[str, list[int]]:
    """Non-empty blocks joined by a blank line, and the start offset of every block (empty ones too).

    An empty block starts where the next text starts, so an offset maps to the last block starting
    at or before it (`bisect_right`).
    """
    parts: list[str] = []
    starts: list[int] = []
    offset = 0
    for block in blocks:
        sep = 2 if parts else 0
        starts.append(offset + sep)
        if block:
            parts.append(block)
            offset += sep + len(block)
    return "\n\n".join(parts), starts


def parse_pdf(data: bytes) -> Parsed:
    """Text of every page (pages separated by a blank line), the PDF title, page count and starts."""
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise UnusableFile("PDF is encrypted; decrypt it first")
        pages = [(page.extract_text() or "").replace("\x00", "").strip() for page in reader.pages]
        title = ""
        if reader.metadata and reader.metadata.title:
            title = str(reader.metadata.title).strip()
    except UnusableFile:
        raise
    except Exception as exc:  # pypdf raises many types on broken input; a bound names itself
        raise bound_hit(exc, "PDF") or UnusableFile(
            f"broken or unreadable PDF: {type(exc).__name__}: {exc}"
        ) from None
    # read by column, tables as Markdown (chunking.documents.furniture); the scanned pages read by OCR
    # (chunking.documents.scanned: a page whose text layer is only furniture counts as scanned); then
    # the furniture of every page, text layer or OCR, dropped and hyphens joined
    pages, cleaned = layout_pdf_pages(data, pages)
    read, ocr = read_scanned_pdf_pages(data, drop_furniture(pages)[0])
    ocr_read = set(ocr.get("ocr_pages", ()))
    pages = [read[i] if i + 1 in ocr_read else text for i, text in enumerate(pages)]
    pages, dropped = strip_furniture(pages)
    cleaned.update(dropped)
    text, starts = join_blocks(pages)
    if not text.strip():
        why = ocr["ocr_failures"][0] if ocr.get("ocr_failures") else "no page has text or a scanned image"
        raise UnusableFile(f"PDF has no extractable text ({len(pages)} pages; {why})")
    return text, title, {"pages": len(pages), "page_starts": starts, **cleaned, **ocr}


def _check_archive(data: bytes, kind: str) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise UnusableFile(f"broken or unreadable {kind}: not a valid Office file ({exc})") from None
    if len(entries) > MAX_ZIP_ENTRIES:
        raise UnusableFile(f"{kind} archive has {len(entries)} entries (limit {MAX_ZIP_ENTRIES})")
    unzipped = sum(e.file_size for e in entries)
    if unzipped > MAX_UNZIPPED_BYTES:
        raise UnusableFile(f"{kind} inflates to {unzipped} bytes (limit {MAX_UNZIPPED_BYTES}): refused")


def _table_rows(rows: Iterable[Iterable[str]]) -> str:
    """A table as one line per row, cells joined by ` | ` (merged cells, repeated by the library, once)."""
    lines = []
    for row in rows:
        cells: list[str] = []
        for cell in row:
            value = " ".join(cell.split())
            if not cells or value != cells[-1]:
                cells.append(value)
        line = " | ".join(cells).strip(" |")
        if line:
            lines.append(line)
    return "\n".join(lines)


def parse_docx(data: bytes) -> Parsed:
    """Paragraphs and tables of a Word document in reading order, one block each."""
    _check_archive(data, "DOCX")
    try:
        import docx
        from docx.table import Table

        document = docx.Document(io.BytesIO(data))
        blocks: list[str] = []
        title = (document.core_properties.title or "").strip()
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                blocks.append(markdown_table([c.text for c in row.cells] for row in item.rows))
                continue
            block = item.text.strip()
            style = (item.style.name if item.style is not None else "") or ""
            if block and not title and style in ("Title", "Heading 1"):
                title = block
            blocks.append(block)
    except Exception as exc:  # python-docx / lxml raise many types on broken input; a bound names itself
        raise bound_hit(exc, "DOCX") or UnusableFile(
            f"broken or unreadable DOCX: {type(exc).__name__}: {exc}"
        ) from None
    text, _ = join_blocks(blocks)
    if not text.strip():
        raise UnusableFile("DOCX has no text")
    return text, title, {"blocks": sum(1 for b in blocks if b)}


def _shape_texts(shapes: Iterable[Any], depth: int = 0) -> Iterator[str]:
    """Text of every shape on a slide in order: text frames by paragraph, tables by row, groups inside."""
    for shape in shapes:
        if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            for paragraph in shape.text_frame.paragraphs:
                line = paragraph.text.replace("\v", "\n").strip()
                if line:
                    yield line
        if getattr(shape, "has_table", False) and shape.has_table:
            rows = _table_rows((c.text for c in row.cells) for row in shape.table.rows)
            if rows:
                yield rows
        inner = getattr(shape, "shapes", None)
        if inner is not None and depth < 32:
            yield from _shape_texts(inner, depth + 1)


NOTES_LABEL = "Speaker notes:"


def _speaker_notes(slide: Any) -> str:
    """A slide's speaker notes as one labelled line ("" when it has none)."""
    if not slide.has_notes_slide:  # reading `notes_slide` would add an empty one
        return ""
    frame = slide.notes_slide.notes_text_frame
    text = " ".join(line.strip() for line in (frame.text if frame is not None else "").splitlines())
    return f"{NOTES_LABEL} {' '.join(text.split())}" if text.strip() else ""


def parse_pptx(data: bytes) -> Parsed:
    """Text of every slide (one block per slide, a line per paragraph, then its speaker notes, so they
    carry the slide's number), with each slide's start offset."""
    _check_archive(data, "PPTX")
    try:
        from pptx import Presentation

        deck = Presentation(io.BytesIO(data))
        title = (deck.core_properties.title or "").strip()
        slides: list[str] = []
        for slide in deck.slides:
            lines = [*_shape_texts(slide.shapes), _speaker_notes(slide)]
            slides.append("\n".join(line for line in lines if line))
            if not title and slide.shapes.title is not None and slide.shapes.title.has_text_frame:
                title = slide.shapes.title.text_frame.text.replace("\v", " ").strip()
    except Exception as exc:  # python-pptx / lxml raise many types on broken input
        # python-pptx names the in-memory stream in its messages; the reason names the content.
        reason = re.sub(r"file '<_io\.BytesIO object at 0x[0-9a-f]+>'", "the file", str(exc))
        raise bound_hit(exc, "PPTX") or UnusableFile(
            f"broken or unreadable PPTX: {type(exc).__name__}: {reason}"
        ) from None
    text, starts = join_blocks(slides)
    if not text.strip():
        raise UnusableFile(f"PPTX has no text ({len(slides)} slides)")
    return text, title, {"slides": len(slides), "slide_starts": starts}


# Binary formats: extension -> (MIME type, parser of the file's bytes). A new binary format is its
# parser above and one entry here; `chunking.documents.files` reads this table.
BINARY_FORMATS: dict[str, tuple[str, Callable[[bytes], Parsed]]] = {
    ".pdf": ("application/pdf", parse_pdf),
    ".docx": ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", parse_docx),
    ".pptx": ("application/vnd.openxmlformats-officedocument.presentationml.presentation", parse_pptx),
    **{ext: (mime, parse_image) for ext, mime in IMAGE_FORMATS.items()},
}
