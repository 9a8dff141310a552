"""OCR (issue 38): scanned PDFs, image-only pages inside text PDFs and image files read by the real Tesseract.

Pages are drawn here as scans (benchmarks/scanned_pages.py: Noto fonts, tilted, noised) and read through
the bounded parsing worker like any file. Skips, saying why, where Tesseract, a language pack or the
fonts are missing (.ci/run installs them).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from chunkyard.chunking.documents import files, ocr, parse_bounds
from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.files import load_file
from PIL import Image

from benchmarks.bench_ocr import cer
from benchmarks.scanned_pages import SAMPLES, font_path, page_pdf, render_page

NEEDED_PACKS = {"eng", "osd", "ukr", "ara", "chi_sim", "spa"}


def _missing() -> str:
    if shutil.which("tesseract") is None:
        return "tesseract-ocr is not installed (.ci/run installs it with apt-get)"
    packs = NEEDED_PACKS - ocr.installed_languages()
    if packs:
        return f"Tesseract language packs missing: {sorted(packs)}"
    if any(font_path(script) is None for script in ("Latin", "Arabic", "Han")):
        return "fonts-noto-core / fonts-noto-cjk are not installed"
    return ""


pytestmark = pytest.mark.skipif(bool(_missing()), reason=_missing() or "OCR available")

EN, ES, UK, AR, ZH = SAMPLES


def _scan(sample=EN, dpi: int = 200) -> Image.Image:
    return render_page(sample.lines, sample.script, dpi)


def _text_pdf(lines: list[str]) -> bytes:
    """A one-page PDF with a text layer (matplotlib's PDF backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(6, 3))
    figure.text(0.05, 0.5, "\n".join(lines))
    out = io.BytesIO()
    figure.savefig(out, format="pdf")
    plt.close(figure)
    return out.getvalue()


def _mixed_pdf(tmp_path: Path) -> Path:
    """Page 1 text, page 2 a scan (Ukrainian), page 3 text: joined with pypdf."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    for data in (
        _text_pdf(["Harbour rules, page one."]),
        page_pdf([_scan(UK)], 200),
        _text_pdf(["Page three."]),
    ):
        writer.append(io.BytesIO(data))
    path = tmp_path / "mixed.pdf"
    with path.open("wb") as handle:
        writer.write(handle)
    return path


def test_scanned_pdf_is_read_page_by_page_with_confidence(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # a parsing worker started by an earlier test writes to that test's stderr: start one under this one
    parse_bounds._stop_all()
    (tmp_path / "scan.pdf").write_bytes(page_pdf([_scan(EN), _scan(AR)], 200))
    doc = load_file(tmp_path / "scan.pdf")
    assert EN.lines[0] in doc.text and AR.lines[3] in doc.text
    second = doc.metadata["page_starts"][1]
    assert doc.text.index(EN.lines[0]) < second <= doc.text.index(AR.lines[3])  # pages keep their numbers
    assert doc.metadata["ocr"] is True and doc.metadata["ocr_pages"] == [1, 2]
    assert 0.8 < doc.metadata["ocr_confidence"] <= 1.0
    assert doc.metadata["ocr_engine"].startswith("tesseract ")
    err = capfd.readouterr().err
    assert "OCR page 1 of 2" in err and "OCR page 2 of 2" in err  # progress per page


def test_image_page_inside_a_text_pdf_is_read_and_the_text_pages_kept(tmp_path: Path) -> None:
    doc = load_file(_mixed_pdf(tmp_path))
    assert doc.metadata["pages"] == 3 and doc.metadata["ocr_pages"] == [2]
    assert "ocr" not in doc.metadata  # its chunks' `page` and `ocr_pages` say which text came from OCR
    starts = doc.metadata["page_starts"]
    assert doc.text.index("Harbour rules") < starts[1] <= doc.text.index(UK.lines[0]) < starts[2]
    assert doc.text.endswith("Page three.")


@pytest.mark.parametrize(("sample", "suffix"), [(ES, ".png"), (ZH, ".jpg"), (UK, ".webp")])
def test_image_files_are_read_in_their_script(tmp_path: Path, sample, suffix: str) -> None:
    path = tmp_path / f"page{suffix}"
    _scan(sample, 300).save(path, quality=85) if suffix != ".png" else _scan(sample, 300).save(path)
    doc = load_file(path)
    assert doc.mime_type.startswith("image/")
    assert cer("\n".join(sample.lines), doc.text, sample.language) < 0.03, doc.text


def test_multi_page_tiff_and_a_photo_of_a_page(tmp_path: Path) -> None:
    first, second = _scan(EN), _scan(ES)
    first.save(tmp_path / "two.tiff", save_all=True, append_images=[second], compression="tiff_lzw")
    doc = load_file(tmp_path / "two.tiff")
    assert doc.metadata["pages"] == 2 and doc.metadata["ocr_pages"] == [1, 2]
    assert doc.text.index(EN.lines[2]) < doc.metadata["page_starts"][1] <= doc.text.index(ES.lines[2])
    photo = render_page(EN.lines, "Latin", 250, rotate_degrees=-2.5, noise=18, seed=3)
    backdrop = Image.new("L", (photo.width + 160, photo.height + 120), 90)  # the desk around the sheet
    backdrop.paste(photo, (80, 50))
    backdrop.convert("RGB").save(tmp_path / "photo.jpg", quality=70)
    # tilted 2.5 degrees on a grey desk: a few characters may be misread
    read = load_file(tmp_path / "photo.jpg").text
    assert cer("\n".join(EN.lines), read, "en") < 0.05, read


def test_an_ocr_page_is_cached_by_content_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ocr.CACHE_ENV, str(tmp_path / "cache"))
    data = page_pdf([_scan(EN)], 200)
    text, *_ = files.parse_bytes(".pdf", data, "scan.pdf")  # in this process: it sees the cache folder
    (entry,) = (tmp_path / "cache").rglob("*.json")
    page = json.loads(entry.read_text(encoding="utf-8"))
    assert page["text"] == text and page["languages"] == "eng+spa"
    entry.write_text(json.dumps({**page, "text": "Read from the cache."}), encoding="utf-8")
    assert files.parse_bytes(".pdf", data, "scan.pdf")[0] == "Read from the cache."  # not read again
    assert files.parse_bytes(".pdf", page_pdf([_scan(ES)], 200), "other.pdf")[0] != "Read from the cache."


def test_pages_past_the_time_bound_are_named_and_the_rest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKYARD_PARSE_TIMEOUT", "2")  # no time left for OCR: the text pages stay
    data = _mixed_pdf(tmp_path).read_bytes()
    text, _, _, extra = files.parse_bytes(".pdf", data, "mixed.pdf")
    assert "Harbour rules" in text and text.endswith("Page three.")
    assert extra["ocr_failures"] == ["page 2: not read, the file's parse time bound ran out"]
    assert "ocr_pages" not in extra


def test_opt_out_and_missing_engine_give_one_line_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scan(EN).save(tmp_path / "page.png")
    (tmp_path / "scan.pdf").write_bytes(page_pdf([_scan(EN)], 150))
    with pytest.raises(UnusableFile, match=r"^image file: OCR is off for this collection \(ocr: false\)$"):
        load_file(tmp_path / "page.png", ocr=False)
    with pytest.raises(UnusableFile, match=r"no text layer; OCR is off \(ocr: false\)\)$"):
        load_file(tmp_path / "scan.pdf", ocr=False)
    mixed = _mixed_pdf(tmp_path).read_bytes()
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    ocr.engine_version.cache_clear()
    ocr.installed_languages.cache_clear()
    try:
        for ext, data in (
            (".png", (tmp_path / "page.png").read_bytes()),
            (".pdf", (tmp_path / "scan.pdf").read_bytes()),
        ):
            with pytest.raises(UnusableFile) as caught:
                files.parse_bytes(ext, data, "x" + ext)
            assert "OCR needs Tesseract, which is not installed" in str(caught.value)
            assert "\n" not in str(caught.value)
        text, _, _, extra = files.parse_bytes(".pdf", mixed, "mixed.pdf")  # the text pages are kept
        assert "Harbour rules" in text and extra["ocr_failures"][0].startswith("page 2: OCR needs Tesseract")
    finally:
        monkeypatch.undo()
        ocr.engine_version.cache_clear()
        ocr.installed_languages.cache_clear()


def test_a_broken_image_is_a_one_line_reason(tmp_path: Path) -> None:
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    with pytest.raises(UnusableFile, match=r"^broken or unreadable image: "):
        load_file(tmp_path / "bad.png")
