"""chunking.documents: every supported format parses; every bad file becomes a failure with a reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from chunkyard.chunking.documents.files import load_file
from chunkyard.chunking.documents.folder import DocumentFailure, load_folder
from chunkyard.chunking.types import sha256_text


def _write(root: Path, rel: str, content: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _make_pdf(path: Path, text: str) -> None:
    """A real text PDF written by matplotlib's PDF backend (fonts embedded, text extractable)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4, 2))
    fig.text(0.1, 0.5, text)
    fig.savefig(path, format="pdf")
    plt.close(fig)


def test_formats_parse_with_ids_relative_to_folder(tmp_path: Path) -> None:
    _write(tmp_path, "intro.md", "# Getting started\n\nchunkyard indexes folders.\n")
    _write(tmp_path, "notes/plain.txt", "Plain text, café and naïve.\r\nSecond line.")
    _write(
        tmp_path,
        "web/page.html",
        "<html><head><title>Page title</title><style>p{}</style></head>"
        "<body><h1>Header</h1><script>var x=1;</script><p>Visible paragraph.</p></body></html>",
    )
    _write(tmp_path, "src/tool.py", "def main() -> None:\n    print('hi')\n")
    _write(tmp_path, "data/record.json", json.dumps({"question": "why?", "answer": "because"}))
    _write(tmp_path, "data/rows.jsonl", '{"a": 1}\n\n{"a": 2}\n')
    _make_pdf(tmp_path / "paper.pdf", "Hello PDF world")

    documents, failures = load_folder(tmp_path, ["**/*"], [])
    assert failures == []
    by_id = {d.id: d for d in documents}
    assert sorted(by_id) == [
        "data/record.json",
        "data/rows.jsonl",
        "intro.md",
        "notes/plain.txt",
        "paper.pdf",
        "src/tool.py",
        "web/page.html",
    ]
    assert by_id["intro.md"].title == "Getting started"
    assert by_id["intro.md"].mime_type == "text/markdown"
    # Text is kept byte-exact (no newline translation): spans index into exactly this.
    assert by_id["notes/plain.txt"].text == "Plain text, café and naïve.\r\nSecond line."
    html = by_id["web/page.html"]
    assert html.title == "Page title"
    assert "Visible paragraph." in html.text and "Header" in html.text
    assert "var x" not in html.text and "p{}" not in html.text
    assert by_id["src/tool.py"].metadata["language"] == "py"
    assert by_id["data/rows.jsonl"].mime_type == "application/jsonl"
    assert "Hello PDF world" in by_id["paper.pdf"].text
    assert by_id["paper.pdf"].metadata["pages"] == 1


def test_include_exclude_globs_and_hidden_files(tmp_path: Path) -> None:
    _write(tmp_path, "a.md", "top level")
    _write(tmp_path, "deep/er/b.md", "nested")
    _write(tmp_path, "deep/c.txt", "not included")
    _write(tmp_path, "drafts/d.md", "excluded")
    _write(tmp_path, ".hidden/e.md", "hidden folder")
    _write(tmp_path, ".f.md", "hidden file")
    documents, failures = load_folder(tmp_path, ["**/*.md"], ["drafts/**"])
    assert [d.id for d in documents] == ["a.md", "deep/er/b.md"]
    assert failures == []
    only_top, _ = load_folder(tmp_path, ["*.md"], [])
    assert [d.id for d in only_top] == ["a.md"]


def test_bad_files_become_failures_and_the_rest_loads(tmp_path: Path) -> None:
    _write(tmp_path, "good.md", "# Fine\n\nStill here.")
    _write(tmp_path, "empty.txt", "")
    _write(tmp_path, "blank.md", "  \n\t\n")
    _write(tmp_path, "latin1.txt", "caf\xe9 au lait".encode("latin-1"))
    _write(tmp_path, "broken.pdf", b"%PDF-1.4\nthis is not really a pdf")
    _write(tmp_path, "bad.json", '{"unterminated": ')
    _write(tmp_path, "image.png", b"\x89PNG\r\n\x1a\n")
    _write(tmp_path, "archive.7z", b"7z\xbc\xaf\x27\x1c")
    _write(tmp_path, "nul.txt", b"abc\x00def")

    documents, failures = load_folder(tmp_path, ["**/*"], [])
    assert [d.id for d in documents] == ["good.md"]
    reasons = {f.path: f.reason for f in failures}
    assert reasons["empty.txt"] == "empty file"
    assert reasons["blank.md"] == "empty file (whitespace only)"
    assert reasons["latin1.txt"].startswith("not valid UTF-8: byte 0xe9 at offset 3 (line 1)")
    assert reasons["broken.pdf"].startswith("broken or unreadable PDF")
    assert reasons["bad.json"].startswith("invalid JSON")
    assert reasons["image.png"] == "broken or unreadable image: not an image file Pillow can read"
    assert reasons["archive.7z"].startswith("unsupported file type '.7z'")
    assert "NUL bytes" in reasons["nul.txt"]
    assert all(isinstance(f, DocumentFailure) for f in failures)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files without read permission")
def test_unreadable_file_is_a_failure(tmp_path: Path) -> None:
    path = _write(tmp_path, "secret.txt", "no access")
    path.chmod(0)
    try:
        documents, failures = load_folder(tmp_path)
    finally:
        path.chmod(0o644)
    assert documents == []
    assert failures == [DocumentFailure("secret.txt", "cannot read file: permission denied")]


def test_missing_folder_and_file_instead_of_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    documents, failures = load_folder(missing, ["**/*"], [])
    assert documents == []
    assert failures == [DocumentFailure(str(missing), f"documents folder not found: {missing}")]
    file_path = _write(tmp_path, "file.txt", "x")
    _, failures = load_folder(file_path)
    assert failures[0].reason.startswith("documents folder is not a directory")


def test_load_file_uses_given_id(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.txt", "hello")
    doc = load_file(path, doc_id="custom/x.txt")
    assert doc.id == "custom/x.txt" and doc.text == "hello"
    assert doc.sha256 == sha256_text("hello")
