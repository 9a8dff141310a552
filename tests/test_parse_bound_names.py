"""Every parse bound names itself when it is hit (issue 41 #7): a DOCX of a million paragraphs is
skipped as past the memory bound, not as a "broken or unreadable DOCX: XMLSyntaxError" (libxml2 reports
its failed allocation as a syntax error), and the XML parser's own safety limits (nesting depth, the
length of one text run) are named as limits. The other files of the folder still load."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import docx
import pytest
from chunkyard.chunking.documents import parse_bounds
from chunkyard.chunking.documents.folder import load_folder

from tests.test_formats import make_docx


def docx_with_body(path: Path, body: bytes) -> None:
    """A valid DOCX (python-docx's own template) whose `word/document.xml` body is `body`."""
    template = io.BytesIO()
    docx.Document().save(template)
    with zipfile.ZipFile(template) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "word/document.xml":
                head, _, tail = data.partition(b"<w:body>")
                data = head + b"<w:body>" + body + tail
            out.writestr(item, data)


def _reasons(folder: Path) -> tuple[set[str], dict[str, str]]:
    documents, failures = load_folder(folder)
    return {d.id for d in documents}, {f.path: f.reason for f in failures}


def test_a_docx_of_a_million_paragraphs_names_the_memory_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(parse_bounds.MEMORY_ENV, "128")
    paragraph = b"<w:p><w:r><w:t>harbour</w:t></w:r></w:p>"
    docx_with_body(tmp_path / "paragraphs.docx", paragraph * 1_000_000)  # 41 MB of XML, ~150 KB zipped
    make_docx(tmp_path / "harbour.docx")
    loaded, reasons = _reasons(tmp_path)
    assert (tmp_path / "paragraphs.docx").stat().st_size < 1_000_000
    assert loaded == {"harbour.docx"}
    assert reasons == {
        "paragraphs.docx": f"parse used more than 128 MB ({parse_bounds.MEMORY_ENV}): not indexed"
    }


def test_the_xml_parsers_own_limits_name_themselves(tmp_path: Path) -> None:
    docx_with_body(tmp_path / "deep.docx", b"<w:p>" * 300 + b"</w:p>" * 300)
    docx_with_body(tmp_path / "long-run.docx", b"<w:p><w:r><w:t>" + b"x" * 11_000_000 + b"</w:t></w:r></w:p>")
    docx_with_body(tmp_path / "broken.docx", b"<w:p><w:r></w:p>")  # bad input: still the parser's message
    make_docx(tmp_path / "harbour.docx")
    loaded, reasons = _reasons(tmp_path)
    assert loaded == {"harbour.docx"}
    assert reasons["deep.docx"] == (
        "DOCX has elements nested deeper than the XML parser's limit of 256 levels: not indexed"
    )
    assert reasons["long-run.docx"] == (
        "DOCX has a text run longer than the XML parser's limit of 10,000,000 bytes: not indexed"
    )
    assert reasons["broken.docx"].startswith(
        "broken or unreadable DOCX: XMLSyntaxError: Opening and ending tag"
    )
