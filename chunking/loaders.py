"""Read a folder of files into Documents; every file that cannot be used becomes a DocumentFailure.

Pure file parsing (no Dagster, no database). A bad file never stops the others: a missing
folder, an empty file, bytes that are not UTF-8, a broken PDF or an unsupported type each
yield a `DocumentFailure(path, reason)` with a reason an operator can act on.

Document ids are the POSIX path of the file relative to the folder (`guide/intro.md`), so
the same file keeps its id across runs and machines.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from chunking.types import Document


@dataclass(frozen=True)
class DocumentFailure:
    """A file (or folder) that produced no document, and why."""

    path: str
    reason: str


# Extension -> MIME type of plain-text files kept exactly as decoded.
TEXT_TYPES: dict[str, str] = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".rst": "text/x-rst",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".xml": "application/xml",
}
CODE_TYPES: dict[str, str] = {
    ".py": "text/x-python",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".ts": "text/x-typescript",
    ".tsx": "text/x-typescript",
    ".jsx": "text/javascript",
    ".java": "text/x-java",
    ".kt": "text/x-kotlin",
    ".go": "text/x-go",
    ".rs": "text/x-rust",
    ".c": "text/x-c",
    ".h": "text/x-c",
    ".cc": "text/x-c++",
    ".cpp": "text/x-c++",
    ".hpp": "text/x-c++",
    ".cs": "text/x-csharp",
    ".rb": "text/x-ruby",
    ".php": "text/x-php",
    ".swift": "text/x-swift",
    ".scala": "text/x-scala",
    ".sh": "text/x-shellscript",
    ".bash": "text/x-shellscript",
    ".sql": "application/sql",
    ".css": "text/css",
    ".r": "text/x-r",
    ".lua": "text/x-lua",
}
HTML_TYPES = {".html": "text/html", ".htm": "text/html"}
JSON_TYPES = {".json": "application/json", ".jsonl": "application/jsonl", ".ndjson": "application/jsonl"}
PDF_TYPES = {".pdf": "application/pdf"}

SUPPORTED_EXTENSIONS = frozenset({*TEXT_TYPES, *CODE_TYPES, *HTML_TYPES, *JSON_TYPES, *PDF_TYPES})


class UnusableFile(ValueError):
    """Raised by a parser with the reason a file yields no document."""


def load_folder(
    folder: str | os.PathLike[str],
    include: Sequence[str] = ("**/*",),
    exclude: Sequence[str] = (),
) -> tuple[list[Document], list[DocumentFailure]]:
    """Every included file under `folder` as a Document, plus a failure for each unusable one.

    `include`/`exclude` are globs on the relative POSIX path (`**` spans folders, `*` does
    not cross `/`). Hidden files and folders (names starting with `.`) are skipped unless a
    pattern names them explicitly. Results are sorted by document id.
    """
    root = Path(folder)
    if not root.exists():
        return [], [DocumentFailure(str(root), f"documents folder not found: {root}")]
    if not root.is_dir():
        return [], [DocumentFailure(str(root), f"documents folder is not a directory: {root}")]
    if not os.access(root, os.R_OK | os.X_OK):
        return [], [
            DocumentFailure(str(root), f"documents folder is not readable (permission denied): {root}")
        ]

    documents: list[Document] = []
    failures: list[DocumentFailure] = []
    walk_errors: list[OSError] = []
    for rel_path, path in _walk(root, walk_errors):
        if not _selected(rel_path, include, exclude):
            continue
        try:
            documents.append(load_file(path, doc_id=rel_path))
        except UnusableFile as exc:
            failures.append(DocumentFailure(rel_path, str(exc)))
    for err in walk_errors:
        rel = _relative(root, Path(err.filename)) if err.filename else str(root)
        failures.append(DocumentFailure(rel, f"cannot list folder: {err.strerror or err}"))
    documents.sort(key=lambda d: d.id)
    failures.sort(key=lambda f: f.path)
    return documents, failures


def list_files(
    folder: str | os.PathLike[str], include: Sequence[str] = ("**/*",), exclude: Sequence[str] = ()
) -> list[tuple[str, Path]]:
    """(document id, path) of every file `load_folder` would consider; [] for a missing folder."""
    root = Path(folder)
    if not root.is_dir():
        return []
    return [(rel, path) for rel, path in _walk(root, []) if _selected(rel, include, exclude)]


def load_file(path: str | os.PathLike[str], doc_id: str | None = None) -> Document:
    """Parse one file into a Document; raises `UnusableFile` (its message is the reason) when it cannot."""
    path = Path(path)
    doc_id = doc_id or path.name
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise UnusableFile(
            f"unsupported file type {ext or '(no extension)'!r}; supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
        )
    try:
        data = path.read_bytes()
    except PermissionError:
        raise UnusableFile("cannot read file: permission denied") from None
    except OSError as exc:
        raise UnusableFile(f"cannot read file: {exc.strerror or exc}") from None
    if not data.strip():
        raise UnusableFile("empty file" if not data else "empty file (whitespace only)")
    metadata = {"path": doc_id, "extension": ext, "size_bytes": len(data)}

    if ext in PDF_TYPES:
        text, title, pages = _parse_pdf(data)
        metadata["pages"] = pages
        return Document(doc_id, text, PDF_TYPES[ext], title or path.stem, metadata)

    text = _decode_utf8(data)
    if ext in HTML_TYPES:
        text, title = _parse_html(text)
        return Document(doc_id, text, HTML_TYPES[ext], title or path.stem, metadata)
    if ext in JSON_TYPES:
        _validate_json(text, jsonl=JSON_TYPES[ext] == "application/jsonl")
        return Document(doc_id, text, JSON_TYPES[ext], path.name, metadata)
    if ext in CODE_TYPES:
        metadata["language"] = ext.lstrip(".")
        return Document(doc_id, text, CODE_TYPES[ext], path.name, metadata)
    title = _markdown_title(text) if TEXT_TYPES[ext] == "text/markdown" else ""
    return Document(doc_id, text, TEXT_TYPES[ext], title or path.stem, metadata)


def _decode_utf8(data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnusableFile(
            f"not valid UTF-8: byte 0x{bad} at offset {exc.start} (line {line}); re-save the file as UTF-8"
        ) from None
    if "\x00" in text:
        raise UnusableFile("contains NUL bytes: looks like a binary file, not text")
    return text


def _parse_html(html: str) -> tuple[str, str]:
    """Visible text of an HTML page (scripts and styles dropped) and its <title>."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    text = "\n".join(_squeeze_blank_lines(lines)).strip()
    if not text:
        raise UnusableFile("HTML page has no visible text")
    return text, title


def _squeeze_blank_lines(lines: Iterable[str]) -> Iterable[str]:
    blank = False
    for line in lines:
        if line:
            blank = False
            yield line
        elif not blank:
            blank = True
            yield ""


def _validate_json(text: str, *, jsonl: bool) -> None:
    if not jsonl:
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise UnusableFile(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError as exc:
                raise UnusableFile(f"invalid JSON Lines: line {number}: {exc.msg}") from None


def _parse_pdf(data: bytes) -> tuple[str, str, int]:
    """Text of every page (pages separated by a blank line), the PDF title and the page count."""
    import logging

    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise UnusableFile("PDF is encrypted; decrypt it first")
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        title = ""
        if reader.metadata and reader.metadata.title:
            title = str(reader.metadata.title).strip()
    except UnusableFile:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise UnusableFile(f"broken or unreadable PDF: {type(exc).__name__}: {exc}") from None
    text = "\n\n".join(p for p in pages if p).replace("\x00", "")
    if not text.strip():
        raise UnusableFile(f"PDF has no extractable text ({len(pages)} pages; scanned images need OCR)")
    return text, title, len(pages)


_MD_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _markdown_title(text: str) -> str:
    match = _MD_HEADING.search(text)
    return match.group(1).strip() if match else ""


def _walk(root: Path, errors: list[OSError]) -> Iterable[tuple[str, Path]]:
    """(relative POSIX path, path) of every regular file under root; symlinked folders not followed."""
    for dirpath, dirnames, filenames in os.walk(root, onerror=errors.append):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(filenames):
            path = base / name
            if path.is_file():
                yield _relative(root, path), path


def _relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _selected(rel_path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    hidden = any(part.startswith(".") for part in rel_path.split("/"))
    included = any(_glob_regex(p).match(rel_path) for p in include)
    if hidden and not any(_names_hidden(p) and _glob_regex(p).match(rel_path) for p in include):
        return False
    return included and not any(_glob_regex(p).match(rel_path) for p in exclude)


def _names_hidden(pattern: str) -> bool:
    return any(part.startswith(".") for part in pattern.split("/"))


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a path glob to a regex: `**/` = any folders (or none), `*` = within one name."""
    out: list[str] = []
    i = 0
    pattern = pattern.strip().lstrip("/")
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            close = pattern.find("]", i + 1)
            if close == -1:
                out.append(re.escape("["))
                i += 1
            else:
                body = pattern[i + 1 : close]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")
