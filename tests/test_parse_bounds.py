"""Every parser of an untrusted format runs under a per-file time and memory bound, in a worker process:
a file past either bound is skipped with the reason, and the other files load (a size limit alone does
not bound a document's cost: the PDF below is 6 KB and takes more than a minute to parse unbounded)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from chunkyard.chunking.documents import parse_bounds
from chunkyard.chunking.documents.folder import load_folder

from tests.test_formats import make_docx, make_pdf


def slow_pdf(repeats: int = 100_000) -> bytes:
    """A valid one-page PDF whose compressed content stream holds `repeats` text-showing operators:
    a few KB on disk, and pypdf's text extraction is superlinear in them (20,000 took 4.4 s here,
    200,000 took 74 s)."""
    content = b"BT /F1 12 Tf 72 712 Td " + b"(hello world) Tj 0 -1 Td " * repeats + b"ET"
    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _good_files(folder: Path) -> set[str]:
    make_pdf(folder / "tides.pdf", ["Tide tables for harbour pilots."])
    make_docx(folder / "harbour.docx")
    (folder / "page.html").write_text("<h1>Orchard</h1><p>Pruning apple trees in winter.</p>")
    (folder / "notes.md").write_text("# Notes\n\nThe glacier survey measured crevasse depth.\n")
    return {"tides.pdf", "harbour.docx", "page.html", "notes.md"}


def test_a_pdf_that_parses_too_long_is_skipped_and_the_rest_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(parse_bounds.TIMEOUT_ENV, "3")
    (tmp_path / "slow.pdf").write_bytes(slow_pdf())
    good = _good_files(tmp_path)
    documents, failures = load_folder(tmp_path)
    assert (tmp_path / "slow.pdf").stat().st_size < 20_000
    assert {d.id for d in documents} == good, failures  # the worker was replaced: later files parse
    assert [(f.path, f.reason) for f in failures] == [
        ("slow.pdf", f"parse took longer than 3 s ({parse_bounds.TIMEOUT_ENV}): not indexed")
    ]


def test_a_file_that_needs_too_much_memory_is_skipped_and_the_rest_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(parse_bounds.MEMORY_ENV, "64")
    (tmp_path / "huge.json").write_text("[" + ",".join(["0.5"] * 3_000_000) + "]")  # 12 MB of floats
    good = _good_files(tmp_path)
    documents, failures = load_folder(tmp_path)
    assert {d.id for d in documents} == good
    assert [(f.path, f.reason) for f in failures] == [
        ("huge.json", f"parse used more than 64 MB ({parse_bounds.MEMORY_ENV}): not indexed")
    ]
    monkeypatch.delenv(parse_bounds.MEMORY_ENV)  # the default bound parses it
    documents, failures = load_folder(tmp_path)
    assert "huge.json" in {d.id for d in documents} and not failures


def test_a_parser_error_in_the_worker_keeps_its_reason(tmp_path: Path) -> None:
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    (tmp_path / "bad.json").write_text(json.dumps({"a": 1})[:-1])
    documents, failures = load_folder(tmp_path)
    assert not documents
    reasons = {f.path: f.reason for f in failures}
    assert reasons["broken.pdf"].startswith("broken or unreadable PDF"), reasons
    assert reasons["bad.json"].startswith("invalid JSON"), reasons


def test_the_bounds_are_settings_with_errors_that_name_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (parse_bounds.parse_timeout(), parse_bounds.parse_memory_mb()) == (120, 2048)
    monkeypatch.setenv(parse_bounds.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=parse_bounds.TIMEOUT_ENV):
        parse_bounds.parse_timeout()
