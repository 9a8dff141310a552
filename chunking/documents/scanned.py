"""Scanned pages into text: image-only PDF pages and image files (PNG, JPEG, TIFF, WebP) read by OCR.

A PDF page whose text layer is (nearly) empty and that holds an image is rendered (pypdfium2) and
read by `chunking.documents.ocr`; the other pages keep their text layer. Each page keeps its
number (`page_starts`), and the document says which pages were read by OCR and how sure it was
(`ocr_pages`, `ocr_page_confidence` for each of them and their mean `ocr_confidence`; `ocr: true` when
all its text came from OCR); each chunk gets the values of the pages it covers (`chunking.ocr_spans`). A
page that cannot be read is named with its reason in `ocr_failures` while the rest of the file is
kept; pages left when the file's time bound runs out are named the same way. OCR can be turned off per collection (`ocr: false`): `ocr_enabled`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.furniture import strip_furniture
from chunkyard.chunking.documents.ocr import (
    MISSING_ENGINE,
    OcrPage,
    OcrUnavailable,
    PageBudget,
    cache_key,
    cached_read,
    engine_version,
    file_budget,
)

log = logging.getLogger("chunkyard.ocr")

# Off for a collection with `ocr: false` (set around one parse by `chunking.documents.files`).
OCR_ENABLED: ContextVar[bool] = ContextVar("ocr_enabled", default=True)
# A page with fewer visible characters than this in its text layer is a scan when it holds an image.
MIN_TEXT_CHARS = 16
MAX_IMAGE_PAGES = 500  # frames of one TIFF read at most
IMAGE_FORMATS: dict[str, str] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".webp": "image/webp",
}


@contextlib.contextmanager
def ocr_enabled(enabled: bool) -> Iterator[None]:
    """OCR on or off for the parses inside the block."""
    token = OCR_ENABLED.set(enabled)
    try:
        yield
    finally:
        OCR_ENABLED.reset(token)


def _progress(message: str, *args: object) -> None:
    """A per-page progress line on stderr (the parsing worker has no logging set up of its own)."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    log.info(message, *args)


def _visible(text: str) -> int:
    return sum(1 for ch in text if ch.isprintable() and not ch.isspace())


class _OcrRun:
    """The pages of one file read by OCR so far, their confidence and the pages that failed."""

    def __init__(self, name: str, budget: PageBudget) -> None:
        self.name, self.budget = name, budget
        self.pages: list[int] = []
        self.confidence: list[float] = []
        self.failures: list[str] = []

    def read(self, number: int, total: int, key: str, render: Callable[[], Any]) -> str:
        """Page `number`'s text ("" when it failed: the failure is recorded with its reason)."""
        if self.budget.left() <= 1:
            self.failures.append(f"page {number}: not read, the file's parse time bound ran out")
            return ""
        _progress("%s: OCR page %d of %d", self.name, number, total)
        try:
            page, cached = cached_read(key, render, self.budget.left())
        except OcrUnavailable:
            raise
        except Exception as exc:  # one bad page never loses the others
            reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.failures.append(f"page {number}: {reason}")
            log.warning("%s: OCR of page %d failed: %s", self.name, number, reason)
            return ""
        if cached:
            _progress("%s: page %d from the OCR cache", self.name, number)
        return self._keep(number, page)

    def _keep(self, number: int, page: OcrPage) -> str:
        if page.text.strip():
            self.pages.append(number)
            self.confidence.append(page.confidence)
        return page.text

    def metadata(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.pages:
            extra["ocr"] = True
            extra["ocr_engine"] = engine_version()
            extra["ocr_pages"] = self.pages
            extra["ocr_confidence"] = round(sum(self.confidence) / len(self.confidence), 4)
            extra["ocr_page_confidence"] = self.confidence  # one per `ocr_pages` entry (chunking.ocr_spans)
        if self.failures:
            extra["ocr_failures"] = self.failures
        return extra


def read_scanned_pdf_pages(data: bytes, pages: list[str]) -> tuple[list[str], dict[str, Any]]:
    """`pages` (a PDF's text layer, one string per page) with every scanned page read by OCR, and the
    metadata saying which. Without OCR (off, or a text layer on every page) `pages` is returned as is."""
    empty = [i for i, text in enumerate(pages) if _visible(text) < MIN_TEXT_CHARS]
    if not empty:
        return pages, {}
    if not OCR_ENABLED.get():
        return pages, {
            "ocr_failures": [f"page {i + 1}: no text layer; OCR is off (ocr: false)" for i in empty]
        }
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    pdf = pdfium.PdfDocument(data)
    try:
        scanned = [i for i in empty if any(pdf[i].get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]))]
        if not scanned:
            return pages, {}
        try:
            engine_version()
        except OcrUnavailable:
            if any(_visible(text) for text in pages):  # keep the text pages, say what was not read
                return pages, {"ocr_failures": [f"page {i + 1}: {MISSING_ENGINE}" for i in scanned]}
            raise
        run = _OcrRun("PDF", file_budget())
        out = list(pages)
        for i in scanned:

            def render(index: int = i) -> Any:
                return pdf[index].render(scale=_dpi() / 72, grayscale=True).to_pil()

            text = run.read(i + 1, len(pages), cache_key(data, f"pdf:{i}"), render)
            if text.strip():
                out[i] = text
        extra = run.metadata()
        if any(_visible(text) for i, text in enumerate(pages) if i not in scanned):
            extra.pop("ocr", None)  # text pages too: `ocr_pages` and each chunk's `page` tell which
        return out, extra
    finally:
        pdf.close()


def _dpi() -> int:
    from chunkyard.chunking.documents import ocr

    return ocr.PDF_DPI


def parse_image(data: bytes) -> tuple[str, str, dict[str, Any]]:
    """An image file's text by OCR (every frame of a multi-page TIFF is a page), title "" and metadata."""
    from PIL import Image, ImageOps, ImageSequence

    if not OCR_ENABLED.get():
        raise UnusableFile("image file: OCR is off for this collection (ocr: false)")
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        frames = [ImageOps.exif_transpose(frame.copy()) for frame in ImageSequence.Iterator(image)]
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise UnusableFile(f"image too large to read: {exc}") from None
    except Image.UnidentifiedImageError:
        raise UnusableFile("broken or unreadable image: not an image file Pillow can read") from None
    except Exception as exc:  # Pillow raises many types on broken input
        raise UnusableFile(f"broken or unreadable image: {type(exc).__name__}: {exc}") from None
    if len(frames) > MAX_IMAGE_PAGES:
        raise UnusableFile(f"image has {len(frames)} pages (limit {MAX_IMAGE_PAGES})")
    engine_version()  # after the checks of the file itself: a broken image is named as such
    run = _OcrRun("image", file_budget())
    texts = [
        run.read(n, len(frames), cache_key(data, f"image:{n}"), lambda f=frame: f)
        for n, frame in enumerate(frames, 1)
    ]
    texts, furniture = strip_furniture(texts)  # a multi-page scan's running header and page numbers
    starts, offset = [], 0
    for page in texts:  # as binary.join_blocks: pages joined by a blank line, the start of each
        starts.append(offset + (2 if offset else 0))
        offset = starts[-1] + len(page) if page else offset
    text = "\n\n".join(page for page in texts if page)
    if not text.strip():
        failed = f": {run.failures[0]}" if run.failures else ""
        raise UnusableFile(f"OCR found no text in the image ({len(frames)} page(s)){failed}")
    extra: dict[str, Any] = {"pages": len(frames), **run.metadata(), **furniture}
    if len(frames) > 1:
        extra["page_starts"] = starts
    return text, "", extra
