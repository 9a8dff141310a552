"""OCR'd pages in chunks (issue 38): each chunk says whether its text came from OCR, from which pages and
how sure the OCR was of them; a scanned file's running header, page numbers and hyphens are cleaned as a
text PDF's are. Pages are drawn as scans (benchmarks/scanned_pages.py) and read by the real Tesseract."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from chunkyard.chunking import build_chunker
from chunkyard.chunking.documents.files import load_file
from chunkyard.chunking.ocr_spans import ocr_span
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store.documents import document_chunks

from benchmarks.scanned_pages import page_pdf, render_page
from tests.test_ocr import _missing, _mixed_pdf

pytestmark = pytest.mark.skipif(bool(_missing()), reason=_missing() or "OCR available")

HEADER = "Northgate Port Authority - Berth Register"
BODIES = (
    (
        "Berth four takes ships up to two hundred metres long.",
        "Its crane lifts forty tonnes and works every night shift.",
    ),
    (
        "Pilots report their position every hour while in the chan-",
        "nel and keep their radios on the harbour frequency.",
    ),
    (
        "Fuel barges call at berth seven on Tuesdays only.",
        "Visitors sign the register at the east gate office.",
    ),
)


def _scanned_register(path: Path) -> None:
    """Three scanned pages, each with the running header on top and `Page N of 3` at the bottom."""
    pages = [
        render_page([HEADER, *body, f"Page {n} of {len(BODIES)}"], "Latin", 200, seed=n)
        for n, body in enumerate(BODIES, start=1)
    ]
    path.write_bytes(page_pdf(pages, 200))


def test_scanned_pages_lose_their_furniture_and_chunks_carry_their_pages_ocr(tmp_path: Path) -> None:
    _scanned_register(tmp_path / "register.pdf")
    doc = load_file(tmp_path / "register.pdf")
    assert doc.metadata["ocr_pages"] == [1, 2, 3]
    # the running header and the page numbers are gone from every page, the body kept
    assert "Northgate" not in doc.text and "Page " not in doc.text, doc.text
    assert doc.metadata["furniture_lines_dropped"] == 6
    for body in BODIES:
        assert body[0].split()[0] in doc.text
    assert "while in the channel and keep" in " ".join(doc.text.split())  # "chan-" + "nel" joined
    confidence = dict(zip(doc.metadata["ocr_pages"], doc.metadata["ocr_page_confidence"], strict=True))
    assert all(0.5 < score <= 1.0 for score in confidence.values())
    assert doc.metadata["ocr_confidence"] == round(sum(confidence.values()) / 3, 4)

    chunks = build_chunker({"strategy": "recursive", "size": 16, "tokenizer": "model"}).chunk(doc)
    assert len(chunks) >= 3
    for chunk in chunks:
        assert chunk.text == doc.text[chunk.start : chunk.end]  # spans exact against the stored text
        covered = list(range(chunk.metadata["page"], chunk.metadata["page_end"] + 1))
        assert chunk.metadata["ocr"] is True and chunk.metadata["ocr_pages"] == covered
        assert chunk.metadata["ocr_confidence"] == min(confidence[page] for page in covered)
    assert {chunk.metadata["page"] for chunk in chunks} == {1, 2, 3}


def test_a_mixed_pdf_s_chunks_say_which_came_from_ocr_once_indexed(tmp_path: Path, store, embedder) -> None:
    doc = load_file(_mixed_pdf(tmp_path))  # page 2 scanned (Ukrainian), pages 1 and 3 text
    assert doc.metadata["ocr_pages"] == [2] and len(doc.metadata["ocr_page_confidence"]) == 1
    config = IndexConfig("recursive-16", {"strategy": "recursive", "size": 16, "tokenizer": "model"})
    spec = IndexSpec(f"mixed{uuid.uuid4().hex[:8]}", config)
    store.documents.sync(spec.collection, [doc], [])
    build_index(store, spec, embedder)
    chunks = document_chunks(store, spec.name, doc.id)
    assert {chunk.metadata["page"] for chunk in chunks} == {1, 2, 3}
    page_two = doc.metadata["ocr_page_confidence"][0]
    for chunk in chunks:
        assert chunk.text == doc.text[chunk.start : chunk.end]
        pages = range(chunk.metadata["page"], chunk.metadata["page_end"] + 1)
        if 2 in pages:  # its text (part of it) read by OCR: the scanned page's confidence, not a mean
            assert chunk.metadata["ocr"] is True and chunk.metadata["ocr_pages"] == [2]
            assert chunk.metadata["ocr_confidence"] == page_two
        else:  # text-layer pages only: no OCR value of the document's is copied onto it
            assert chunk.metadata["ocr"] is False
            assert "ocr_pages" not in chunk.metadata and "ocr_confidence" not in chunk.metadata


def test_ocr_span_of_documents_without_or_with_partial_values() -> None:
    assert ocr_span({"pages": 2}, 1, 2) == {}  # no page read by OCR: nothing said
    meta = {"ocr_pages": [2, 3], "ocr_page_confidence": [0.91, 0.72]}
    assert ocr_span(meta, 1, 1) == {"ocr": False}
    assert ocr_span(meta, 1, 2) == {"ocr": True, "ocr_pages": [2], "ocr_confidence": 0.91}
    assert ocr_span(meta, 2, 3) == {"ocr": True, "ocr_pages": [2, 3], "ocr_confidence": 0.72}
    # a document stored before per-page values existed: pages said, no confidence made up
    assert ocr_span({"ocr_pages": [1], "ocr_confidence": 0.9}, 1, 1) == {"ocr": True, "ocr_pages": [1]}
