"""A folder with one file of every supported format (issue 38), a scanned PDF and a photo of a page among
them, indexed by the real CLI: every file is read or skipped with a reason, and `chunkyard search`
finds a sentence that exists only in the scanned page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from chunkyard.chunking.documents.files import SUPPORTED_EXTENSIONS

from benchmarks.scanned_pages import SAMPLES, page_pdf, render_page
from tests.cli_helpers import cli_env, run_cli
from tests.test_formats import make_docx, make_pdf, make_pptx
from tests.test_ocr import _missing
from tests.test_office_formats import RTF, make_eml, make_epub, make_ods, make_odt, make_xlsx

SCANNED_ONLY = (
    "The quartermaster keeps the brass sextant in locker nineteen.",
    "Nobody may borrow it without the captain's written note.",
)
# extension -> a file of that kind with one plain sentence (text formats)
TEXT_FILES = {
    ".txt": "Garden notes: tomatoes need sun, water and patience.",
    ".text": "Plain text about the bakery's sourdough starter.",
    ".md": "# Pets\n\nThe llama eats hay every Tuesday morning.",
    ".markdown": "# Bees\n\nThe hive swarms in late spring.",
    ".rst": "Lighthouse\n==========\n\nThe lamp turns twice a minute.",
    ".csv": "port,depth\nVigo,12\n",
    ".tsv": "port\tberths\nCadiz\t9\n",
    ".yaml": "harbour: {pilots: 4}\n",
    ".yml": "ferry: {crossings: 6}\n",
    ".toml": "[tug]\nengines = 2\n",
    ".ini": "[crane]\nload = 40\n",
    ".cfg": "[dock]\nlength = 300\n",
    ".xml": "<manifest><cargo>timber</cargo></manifest>",
    ".html": "<html><body><h1>Kitchen</h1><p>Bread rises overnight.</p></body></html>",
    ".htm": "<html><body><p>The galley closes at ten.</p></body></html>",
    ".json": '{"buoy": "green", "side": "east"}',
    ".jsonl": '{"tide": "high"}\n{"tide": "low"}\n',
    ".ndjson": '{"wind": "north"}\n',
}
CODE = "def knots_to_kmh(knots: float) -> float:\n    return knots * 1.852\n"


def _every_format(folder: Path) -> set[str]:
    """One file per supported extension, and an unsupported one; the names of the files written."""
    for ext, text in TEXT_FILES.items():
        (folder / f"file{ext}").write_text(text + "\n", encoding="utf-8")
    from chunkyard.chunking.documents.files import CODE_TYPES

    for ext in CODE_TYPES:
        (folder / f"code{ext}").write_text(CODE, encoding="utf-8")
    make_pdf(folder / "text.pdf", ["Tide tables for harbour pilots."])
    make_docx(folder / "harbour.docx")
    make_pptx(folder / "review.pptx")
    make_xlsx(folder / "stock.xlsx")
    make_ods(folder / "tides.ods")
    make_eml(folder / "mail.eml")
    make_epub(folder / "book.epub")
    make_odt(folder / "ferry.odt")
    (folder / "note.rtf").write_bytes(RTF)
    english = SAMPLES[0]
    (folder / "scan.pdf").write_bytes(page_pdf([render_page(SCANNED_ONLY, "Latin", 200)], 200))
    photo = render_page(english.lines, "Latin", 250, rotate_degrees=-2, noise=16, seed=5)
    photo.convert("RGB").save(folder / "photo.jpg", quality=75)
    render_page(english.lines[:2], "Latin", 200).save(folder / "page.png")
    render_page(english.lines[2:4], "Latin", 200).save(folder / "page.tif")
    render_page(english.lines[4:], "Latin", 200).save(folder / "page.tiff")
    render_page(english.lines[1:3], "Latin", 200).save(folder / "page.jpeg", quality=80)
    render_page(english.lines[3:5], "Latin", 200).save(folder / "page.webp", quality=80)
    (folder / "archive.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    written = {p.name for p in folder.iterdir()}
    assert {Path(name).suffix for name in written} >= SUPPORTED_EXTENSIONS  # none is left out
    return written


@pytest.mark.slow
@pytest.mark.skipif(bool(_missing()), reason=_missing() or "OCR available")
def test_every_format_indexes_and_search_finds_the_scanned_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKYARD_OCR_CACHE", str(tmp_path / "ocr-cache"))
    docs = tmp_path / "office"
    docs.mkdir()
    written = _every_format(docs)
    project = tmp_path / "work"
    project.mkdir()
    assert run_cli(["init"], project).returncode == 0
    added = run_cli(["add", "office", str(docs)], project)
    assert added.returncode == 0, added.stderr
    indexed = run_cli(["index"], project)
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    out = indexed.stdout
    # every file but the zip, and the mail's attached CSV as a document of its own
    assert f"{len(written)} added" in out and "1 failed" in out, out
    assert re.search(r"- archive\.zip: unsupported file type '\.zip'", out), out

    done = run_cli(["search", "where is the brass sextant kept", "-k", "3"], project)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[1]
    assert re.match(r"1\. scan\.pdf \(page 1\) \[", first), done.stdout
    shown = json.loads(run_cli(["search", "brass sextant locker", "-k", "1", "--json"], project).stdout)
    hit = shown["results"][0]
    assert hit["doc_id"] == "scan.pdf" and "locker nineteen" in hit["text"]
    assert hit["metadata"]["ocr"] is True and hit["metadata"]["ocr_pages"] == [1]
    assert cli_env()  # the CLI ran without any project variable from this process
