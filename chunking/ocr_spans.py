"""A chunk's OCR values: whether its text came from pages read by OCR, which pages, and their lowest confidence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def page_confidence(metadata: Mapping[str, Any]) -> dict[int, float]:
    """{page number: OCR confidence} of a document's pages read by OCR (`ocr_pages` and
    `ocr_page_confidence`, `chunking.documents.scanned`); a page without a valid confidence maps to -1."""
    pages = metadata.get("ocr_pages")
    if not isinstance(pages, list):
        return {}
    scores = metadata.get("ocr_page_confidence")
    if not isinstance(scores, list) or len(scores) != len(pages):
        scores = [-1.0] * len(pages)
    return {
        page: float(score) if isinstance(score, int | float) else -1.0
        for page, score in zip(pages, scores, strict=True)
        if isinstance(page, int)
    }


def ocr_span(metadata: Mapping[str, Any], first_page: int, last_page: int) -> dict[str, Any]:
    """The OCR metadata of a chunk on pages `first_page`..`last_page` of a document with `metadata`:
    {} when the document has no page read by OCR; else `ocr` (any of the chunk's pages read by OCR)
    and, when true, `ocr_pages` (those pages) and `ocr_confidence` (the lowest of their confidences:
    the chunk's text is as sure as its least sure page)."""
    confidence = page_confidence(metadata)
    if not confidence:
        return {}
    covered = sorted(page for page in confidence if first_page <= page <= last_page)
    if not covered:
        return {"ocr": False}
    out: dict[str, Any] = {"ocr": True, "ocr_pages": covered}
    known = [confidence[page] for page in covered if confidence[page] >= 0]
    if known:
        out["ocr_confidence"] = min(known)
    return out
