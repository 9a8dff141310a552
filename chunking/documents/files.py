"""One file into a Document: its type by extension, a size limit, and a read that follows no new link.

A file over `max_document_bytes()` (`CHUNKYARD_MAX_DOCUMENT_BYTES`, default 20 MiB) is refused
before it is read. Text formats are one entry (extension and MIME type) in the type tables below;
binary formats are parsers in `chunking.documents.binary`. Untrusted structured formats (binary,
HTML, JSON) parse in a worker under a time and memory bound (`chunking.documents.parse_bounds`). A resolved
path is opened one component at a time without following symlinks (`chunking.documents.safe_open`), so a
folder that changes while it is read (a subfolder swapped for a link) can never lead outside it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path

from chunkyard.chunking.documents.binary import BINARY_FORMATS as DOCUMENT_FORMATS
from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.office import ATTACHMENT_FILES, OFFICE_FORMATS, TABLE_TYPES, csv_table
from chunkyard.chunking.documents.parse_bounds import run_bounded
from chunkyard.chunking.documents.safe_open import PathChanged, open_resolved
from chunkyard.chunking.documents.scanned import ocr_enabled
from chunkyard.chunking.documents.text import decode_text, has_visible_text, settled_text, validate_json
from chunkyard.chunking.documents.walk import file_kind
from chunkyard.chunking.documents.webpage import parse_html
from chunkyard.chunking.environment import env_int
from chunkyard.chunking.types import Document

# Extension -> MIME type of plain-text files kept exactly as decoded.
TEXT_TYPES: dict[str, str] = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".rst": "text/x-rst",
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

# Binary formats: documents and images (chunking.documents.binary), office files (chunking.documents.office).
BINARY_FORMATS = {**DOCUMENT_FORMATS, **OFFICE_FORMATS}

SUPPORTED_EXTENSIONS = frozenset(
    {*TEXT_TYPES, *CODE_TYPES, *HTML_TYPES, *JSON_TYPES, *TABLE_TYPES, *BINARY_FORMATS}
)

MAX_DOCUMENT_BYTES_ENV = "CHUNKYARD_MAX_DOCUMENT_BYTES"
DEFAULT_MAX_DOCUMENT_BYTES = 20 * 1024 * 1024


def max_document_bytes() -> int:
    """The per-document size limit: `CHUNKYARD_MAX_DOCUMENT_BYTES` (bytes) or 20 MiB.

    It bounds memory per document (file bytes, and extracted text of as many characters).
    """
    return env_int(MAX_DOCUMENT_BYTES_ENV, DEFAULT_MAX_DOCUMENT_BYTES, unit="a number of bytes")


def load_file(
    path: str | os.PathLike[str],
    doc_id: str | None = None,
    *,
    max_bytes: int | None = None,
    ocr: bool = True,
) -> Document:
    """Parse one file into a Document; raises `UnusableFile` (its message is the reason) when it cannot.

    `ocr=False` leaves scanned pages and image files unread (chunking.documents.scanned)."""
    path = Path(path)
    limit = max_document_bytes() if max_bytes is None else max_bytes
    return read_document(path, doc_id or path.name, limit, nofollow=False, ocr=ocr)


def read_document(
    path: Path,
    doc_id: str,
    max_bytes: int,
    *,
    nofollow: bool,
    ocr: bool = True,
    attachments: list[Document] | None = None,
) -> Document:
    """One file as a Document. Given a list as `attachments`, a mail's attachments are appended to it
    as Documents of their own (id `<mail id>/<file name>`, metadata `parent`); else they are left."""
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise UnusableFile(
            f"unsupported file type {ext or '(no extension)'!r}; supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
        )
    data = _read_regular_file(path, max_bytes, nofollow=nofollow)
    if ext not in BINARY_FORMATS:  # a text file caught mid-write is read again, not called broken
        data = settled_text(
            data,
            lambda: _read_regular_file(path, max_bytes, nofollow=nofollow),
            lambda: _size(path, nofollow=nofollow),
        )
    document, attached = document_from_bytes(doc_id, path.name, data, max_bytes, ocr=ocr)
    if attachments is not None:
        attachments.extend(attachment_documents(document, attached, max_bytes, ocr=ocr))
    return document


def document_from_bytes(
    doc_id: str, name: str, data: bytes, max_bytes: int, *, ocr: bool = True
) -> tuple[Document, list[tuple[str, bytes]]]:
    """A file's bytes (`name` gives its type) as a Document, and the files attached to it (a mail's)."""
    ext = Path(name).suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise UnusableFile(f"unsupported file type {ext or '(no extension)'!r}")
    if not data.strip():
        raise UnusableFile("empty file" if not data else "empty file (whitespace only)")
    metadata: dict = {"path": doc_id, "extension": ext, "size_bytes": len(data)}
    # untrusted structured formats parse under a time and memory bound, in a worker (parse_bounds)
    if ext in BINARY_FORMATS or ext in HTML_TYPES or ext in JSON_TYPES or ext in TABLE_TYPES:
        text, mime, title, extra = run_bounded(parse_bytes, ext, data, name, ocr, warm_up=warm_parsers)
    else:
        text, mime, title, extra = parse_bytes(ext, data, name)
    attached = extra.pop(ATTACHMENT_FILES, [])
    metadata.update(extra)
    if not has_visible_text(text):
        raise UnusableFile("no visible text (only whitespace or invisible characters)")
    if len(text) > max_bytes:
        raise UnusableFile(
            f"extracted text has {len(text)} characters, over the limit of {max_bytes}"
            f" ({MAX_DOCUMENT_BYTES_ENV})"
        )
    return Document(doc_id, text, mime, title or Path(name).stem, metadata), attached


def attachment_documents(
    parent: Document, attached: list[tuple[str, bytes]], max_bytes: int, *, ocr: bool = True
) -> list[Document]:
    """A mail's attachments as Documents `<parent id>/<name>` with `parent` metadata; one that cannot
    be read is named with its reason in the parent's `attachments_skipped` (nested mails' attachments
    are not followed)."""
    out: list[Document] = []
    seen: set[str] = set()
    for name, data in attached:
        doc_id = f"{parent.id}/{name}"
        for n in range(2, len(attached) + 2):
            if doc_id not in seen:
                break
            doc_id = f"{parent.id}/{Path(name).stem}-{n}{Path(name).suffix}"
        seen.add(doc_id)
        try:
            child, _ = document_from_bytes(doc_id, name, data, max_bytes, ocr=ocr)
        except UnusableFile as exc:
            parent.metadata.setdefault("attachments_skipped", []).append(f"{name}: {exc}")
            continue
        child.metadata.update(parent=parent.id, attachment=name)
        out.append(child)
    return out


def warm_parsers() -> None:
    """The bounded parsers' one-time initialisation (imports and data loaded on first use), run by a new
    parsing worker before its first file (chunking.documents.parse_bounds)."""
    for ext, data in ((".html", b"<html><body><p>warm</p></body></html>"), (".json", b"{}")):
        parse_bytes(ext, data, "warm")
    with contextlib.suppress(UnusableFile):
        parse_bytes(".pdf", b"%PDF-1.4", "warm")


def parse_bytes(ext: str, data: bytes, name: str, ocr: bool = True) -> tuple[str, str, str, dict]:
    """(text, mime type, title, extra metadata) of a file's bytes by its extension `ext`; `ocr` False
    leaves scanned pages unread."""
    if ext in BINARY_FORMATS:
        mime, parse = BINARY_FORMATS[ext]
        with ocr_enabled(ocr):
            text, title, extra = parse(data)
        return text, mime, title, extra
    text = decode_text(data)
    if ext in HTML_TYPES:
        text, title = parse_html(text)
        return text, HTML_TYPES[ext], title, {}
    if ext in TABLE_TYPES:
        mime, delimiter = TABLE_TYPES[ext]
        return csv_table(text, delimiter), mime, name, {"tables": 1}
    if ext in JSON_TYPES:
        validate_json(text, jsonl=JSON_TYPES[ext] == "application/jsonl")
        return text, JSON_TYPES[ext], name, {}
    if ext in CODE_TYPES:
        return text, CODE_TYPES[ext], name, {"language": ext.lstrip(".")}
    mime = TEXT_TYPES[ext]
    return text, mime, _markdown_title(text) if mime == "text/markdown" else "", {}


def _read_regular_file(path: Path, max_bytes: int, *, nofollow: bool) -> bytes:
    """The file's bytes, refusing special files (never blocks on a FIFO) and files over `max_bytes`."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        # the path was resolved: a link appearing since on any component is refused, not followed
        fd = open_resolved(path, flags) if nofollow else os.open(path, flags)
    except PermissionError:
        raise UnusableFile("cannot read file: permission denied") from None
    except PathChanged as exc:
        raise UnusableFile(f"cannot read file: {exc.strerror}: not followed, for safety") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnusableFile("cannot read file: it became a symlink while being read") from None
        raise UnusableFile(f"cannot read file: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnusableFile(f"not a regular file ({file_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise UnusableFile(_too_large(info.st_size, max_bytes))
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise UnusableFile(f"cannot read file: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # grew while being read
        raise UnusableFile(_too_large(len(data), max_bytes))
    return data


def _size(path: Path, *, nofollow: bool) -> int:
    if not nofollow:
        return os.stat(path).st_size
    fd = open_resolved(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _too_large(size: int, max_bytes: int) -> str:
    return (
        f"file too large: {size} bytes, over the limit of {max_bytes} bytes"
        f" (raise {MAX_DOCUMENT_BYTES_ENV} to index it)"
    )


_MD_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _markdown_title(text: str) -> str:
    match = _MD_HEADING.search(text)
    return match.group(1).strip() if match else ""
