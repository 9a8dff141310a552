"""Document formats (issue 15): DOCX, PPTX and PDF pages, on real files written here with the same
libraries (python-docx, python-pptx; matplotlib's PDF backend), and a corrupt file of every type.

Chunks are exact spans of the extracted text; PDF chunks carry `page`/`page_end`, PPTX chunks
`slide`/`slide_end`. The last test runs the real pipeline (Postgres, the model).
"""

from __future__ import annotations

import bisect
import io
import zipfile
from pathlib import Path

import chunkyard.chunking.documents.binary as binary
import chunkyard.chunking.documents.files as files
from chunkyard.chunking import build_chunker
from chunkyard.chunking.documents.binary import BINARY_FORMATS
from chunkyard.chunking.documents.folder import load_folder

DOCX_MIME = BINARY_FORMATS[".docx"][0]
PPTX_MIME = BINARY_FORMATS[".pptx"][0]


def make_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Harbour manual", level=0)
    document.add_paragraph("The walrus handbook explains tide tables for harbour pilots.")
    document.add_heading("Berths", level=1)
    table = document.add_table(rows=2, cols=2)
    for (r, c), value in {(0, 0): "berth", (0, 1): "depth", (1, 0): "north", (1, 1): "12 m"}.items():
        table.cell(r, c).text = value
    document.add_paragraph("Anchoring is forbidden inside the turning basin.")
    document.save(path)


SLIDES = [
    ("Quarterly review", "Revenue grew in the northern region."),
    ("Lighthouse roadmap", "The beacon upgrade ships in spring.\nSolar panels follow."),
    ("Questions", "Ask the ferry operations team."),
]


def make_pptx(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for number, (title, body) in enumerate(SLIDES, start=1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text_frame.text = body
        if number == 2:
            shape = slide.shapes.add_table(2, 2, Inches(1), Inches(5), Inches(4), Inches(1))
            for (r, c), value in {(0, 0): "phase", (0, 1): "month", (1, 0): "beacon", (1, 1): "May"}.items():
                shape.table.cell(r, c).text = value
        if number == 3:  # speaker notes: indexed with their slide's number
            slide.notes_slide.notes_text_frame.text = "Thank the cartographers\nfor the coastline charts."
    deck.save(path)


PAGES = ["First page about walruses and tides.", "", "Third page about lighthouses and beacons."]


def make_pdf(path: Path, pages: list[str]) -> None:
    """A real multi-page text PDF (matplotlib's PDF backend; an empty string is a blank page)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        for text in pages:
            fig = plt.figure(figsize=(5, 2))
            if text:
                fig.text(0.05, 0.5, text)
            pdf.savefig(fig)
            plt.close(fig)


def _one(folder: Path):
    documents, failures = load_folder(folder)
    assert failures == [] and len(documents) == 1
    return documents[0]


def test_docx_text_is_paragraphs_and_tables_in_reading_order(tmp_path: Path) -> None:
    make_docx(tmp_path / "manual.docx")
    doc = _one(tmp_path)
    assert doc.mime_type == DOCX_MIME and doc.title == "Harbour manual"
    assert doc.text == (
        "Harbour manual\n\nThe walrus handbook explains tide tables for harbour pilots.\n\nBerths\n\n"
        "| berth | depth |\n| --- | --- |\n| north | 12 m |\n\nAnchoring is forbidden inside the turning basin."
    )
    chunks = build_chunker({"strategy": "recursive", "size": 12, "tokenizer": "model"}).chunk(doc)
    assert len(chunks) > 3
    for c in chunks:
        assert c.text == doc.text[c.start : c.end]
    assert all(c.metadata.get("table") for c in chunks if "|" in c.text)
    chunks = build_chunker({"strategy": "recursive", "size": 24, "tokenizer": "model"}).chunk(doc)
    (table,) = [c for c in chunks if c.metadata.get("table")]  # a Markdown table, whole
    assert table.text == "| berth | depth |\n| --- | --- |\n| north | 12 m |"


def test_pptx_chunks_know_their_slide(tmp_path: Path) -> None:
    make_pptx(tmp_path / "deck.pptx")
    doc = _one(tmp_path)
    assert doc.mime_type == PPTX_MIME and doc.title == "Quarterly review"
    starts = doc.metadata["slide_starts"]
    assert doc.metadata["slides"] == 3 and starts[0] == 0
    for number, (title, body) in enumerate(SLIDES, start=1):
        at = doc.text.index(title)
        assert bisect.bisect_right(starts, at) == number
        assert body.split("\n")[0] in doc.text
    assert "phase | month\nbeacon | May" in doc.text
    chunks = build_chunker({"strategy": "sentence", "size": 10, "tokenizer": "model"}).chunk(doc)
    for c in chunks:
        assert c.text == doc.text[c.start : c.end]
        assert c.metadata["slide"] == bisect.bisect_right(starts, c.start)
        assert c.metadata["slide_end"] == bisect.bisect_right(starts, c.end - 1)
    assert {c.metadata["slide"] for c in chunks} == {1, 2, 3}
    assert next(c for c in chunks if "beacon upgrade" in c.text).metadata["slide"] == 2
    assert "Speaker notes: Thank the cartographers for the coastline charts." in doc.text
    notes_at = doc.text.index("cartographers")
    assert next(c for c in chunks if c.start <= notes_at < c.end).metadata["slide"] == 3
    assert doc.text.count("Speaker notes:") == 1  # slides without notes get no label


def test_pdf_chunks_carry_page_numbers_and_blank_pages_are_skipped(tmp_path: Path) -> None:
    make_pdf(tmp_path / "paper.pdf", PAGES)
    doc = _one(tmp_path)
    assert doc.metadata["pages"] == 3
    assert doc.text == f"{PAGES[0]}\n\n{PAGES[2]}"
    assert doc.metadata["page_starts"] == [0, len(PAGES[0]) + 2, len(PAGES[0]) + 2]
    chunks = build_chunker({"strategy": "sentence", "size": 8, "tokenizer": "model"}).chunk(doc)
    pages = {(c.metadata["page"], c.metadata["page_end"]) for c in chunks}
    assert pages == {(1, 1), (3, 3)}
    one_chunk = build_chunker({"strategy": "token", "size": 256, "tokenizer": "model"}).chunk(doc)
    assert [(c.metadata["page"], c.metadata["page_end"]) for c in one_chunk] == [(1, 3)]


def _corrupt_files(root: Path) -> dict[str, str]:
    """{file name: start of its expected failure reason}: a broken file of every supported kind."""
    make_docx(root / "real.docx")
    docx_bytes = (root / "real.docx").read_bytes()
    (root / "real.docx").unlink()
    files: dict[str, tuple[bytes, str]] = {
        "random.docx": (bytes(range(256)) * 8, "broken or unreadable DOCX"),
        "truncated.docx": (docx_bytes[: len(docx_bytes) // 2], "broken or unreadable DOCX"),
        "random.pptx": (b"PK\x03\x04 not really a zip", "broken or unreadable PPTX"),
        "word-as-slides.pptx": (docx_bytes, "broken or unreadable PPTX"),
        "broken.pdf": (
            b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ntrailer garbage",
            "broken or unreadable PDF",
        ),
        "binary.html": (b"<html><body>\xff\xfe\x00\x01</body></html>", "not valid UTF-8"),
        "scripts-only.html": (b"<html><script>var a = 1;</script></html>", "HTML page has no visible text"),
        "latin1.md": ("# Caf\xe9".encode("latin-1"), "not valid UTF-8"),
        "binary.txt": (bytes(range(1, 32)) * 40, "not text:"),
    }
    for name, (data, _) in files.items():
        (root / name).write_bytes(data)
    return {name: reason for name, (_, reason) in files.items()}


def test_a_corrupt_file_of_every_type_is_reported_and_skipped(tmp_path: Path) -> None:
    expected = _corrupt_files(tmp_path)
    (tmp_path / "good.md").write_text("# Good\n\nStill loads.", encoding="utf-8")
    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == ["good.md"]
    reasons = {f.path: f.reason for f in failures}
    assert set(reasons) == set(expected)
    for name, start in expected.items():
        assert reasons[name].startswith(start), (name, reasons[name])


def test_office_zip_bombs_are_refused_before_parsing(tmp_path: Path, monkeypatch) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * 200_000)
    (tmp_path / "bomb.docx").write_bytes(buffer.getvalue())
    monkeypatch.setattr(binary, "MAX_UNZIPPED_BYTES", 100_000)
    # in this process: the parsing worker (chunking.documents.parse_bounds) would not see the patched limit
    monkeypatch.setattr(files, "run_bounded", lambda func, *args, **_: func(*args))
    _, failures = load_folder(tmp_path)
    assert failures[0].reason == "DOCX inflates to 200000 bytes (limit 100000): refused"


def test_every_format_is_indexed_and_searchable_and_bad_files_reported(
    tmp_path: Path, store, embedder
) -> None:
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

    expected_failures = _corrupt_files(tmp_path)
    (tmp_path / "notes.md").write_text("# Notes\n\nThe glacier survey measured crevasse depth.", "utf-8")
    (tmp_path / "plain.txt").write_text("Beekeepers harvest honey from the apiary in August.", "utf-8")
    (tmp_path / "page.html").write_text("<h1>Orchard</h1><p>Pruning apple trees in winter.</p>", "utf-8")
    make_pdf(tmp_path / "paper.pdf", PAGES)
    make_docx(tmp_path / "manual.docx")
    make_pptx(tmp_path / "deck.pptx")
    documents, failures = load_folder(tmp_path)
    assert sorted(d.id for d in documents) == [
        "deck.pptx",
        "manual.docx",
        "notes.md",
        "page.html",
        "paper.pdf",
        "plain.txt",
    ]
    assert sorted(f.path for f in failures) == sorted(expected_failures)

    spec = IndexSpec(
        "formats",
        IndexConfig(name="sentence-32", chunker={"strategy": "sentence", "size": 32, "tokenizer": "model"}),
    )
    store.documents.sync(spec.collection, documents, failures)
    assert build_index(store, spec, embedder).published
    searcher = Searcher(store, embedder)
    for query, doc_id in [
        ("anchoring forbidden turning basin", "manual.docx"),
        ("beacon upgrade ships in spring", "deck.pptx"),
        ("lighthouses and beacons third page", "paper.pdf"),
        ("glacier crevasse survey", "notes.md"),
    ]:
        assert searcher.search(query, spec.name, k=1, mode="hybrid")[0].doc_id == doc_id, query
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT doc_id, text, metadata FROM chunks WHERE index_name = %s AND doc_id IN"
            " ('paper.pdf', 'deck.pptx')",
            (spec.name,),
        ).fetchall()
    for doc_id, text, metadata in rows:
        assert "page_starts" not in metadata and "slide_starts" not in metadata  # not copied per chunk
        if doc_id == "paper.pdf":
            assert metadata["page"] == (1 if "First page" in text else 3)
            assert metadata["page_end"] == (3 if "Third page" in text else 1)
        else:
            assert metadata["slide"] in (1, 2, 3)


def test_html_keeps_the_main_text_and_drops_navigation_and_footers() -> None:
    """The issue's page: a menu bar "Inicio | Blog | Herramientas" is not content; the article is."""
    from chunkyard.chunking.documents.webpage import parse_html

    from benchmarks.bench_html_extraction import PAGES

    blog = PAGES[0]
    text, title = parse_html(blog.html)
    flat = " ".join(text.split())
    assert title == "Cuidar las herramientas"
    assert all(sentence in flat for sentence in blog.content)
    assert not any(noise in flat for noise in blog.boilerplate), text
    assert "Cuidar las herramientas del jardín\n\n" in text  # headings stay, blocks split by blank lines
    text, _ = parse_html("<html><body><h1>Kitchen</h1><p>Bread rises overnight.</p></body></html>")
    assert "Bread rises overnight." in text  # a page with no main text to find keeps its visible text
