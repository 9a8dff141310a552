"""Read a folder of files into Documents; every file that cannot be used becomes a DocumentFailure.

Pure file parsing (no Dagster, no database). A bad file never stops the others: a missing
folder, an empty file, bytes that are not UTF-8, a broken PDF or an unsupported type each
yield a `DocumentFailure(path, reason)` with a reason an operator can act on, and so does any
other exception a parser raises on one file.

Nothing outside the folder is ever read: every path is resolved, and a symlink whose target lies
outside the folder (or that dangles, or loops) is refused with its reason. `list_files` (the
sensor's view) applies the same rule (`resolve_entry`). The resolved path is then opened one
component at a time without following symlinks (`chunking.safe_open`), so a folder that changes
while it is read (a subfolder swapped for a link) can never lead outside it. A file over `max_document_bytes()`
(`CHUNKYARD_MAX_DOCUMENT_BYTES`, default 20 MiB) is refused before it is read.

Document ids are the POSIX path of the file relative to the folder (`guide/intro.md`), so
the same file keeps its id across runs and machines. A name that is not valid UTF-8 cannot be
an id: it is reported under its escaped form (`bad\\xff.txt`).

`scan_folder` also skips reading a file whose stat signature (size, mtime, ctime, inode) equals the
one recorded when it was last read, as git's index does: a one-document update of a large folder
then reads one file. A signature from within `RACY_SECONDS` of the scan is not recorded, so a file
rewritten twice within one clock tick is still read again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from chunking.environment import env_int
from chunking.formats import (
    BINARY_FORMATS,
    UnusableFile,
    decode_text,
    has_visible_text,
    parse_html,
    settled_text,
    validate_json,
)
from chunking.parse_bounds import run_bounded
from chunking.safe_open import PathChanged, open_resolved
from chunking.types import Document

__all__ = [
    "DocumentFailure",
    "FolderScan",
    "UnusableFile",
    "list_files",
    "load_file",
    "load_folder",
    "max_document_bytes",
    "scan_folder",
]


@dataclass(frozen=True)
class DocumentFailure:
    """A file (or folder) that produced no document, and why."""

    path: str
    reason: str


@dataclass
class FolderScan:
    """What `scan_folder` found: documents read, files that gave none, and files left unread.

    `unchanged` holds the ids whose stat signature matched `known` (not read, so no Document);
    `signatures` the signature of every read or unchanged file that may be trusted next time.
    """

    documents: list[Document] = field(default_factory=list)
    failures: list[DocumentFailure] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    signatures: dict[str, str] = field(default_factory=dict)


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

SUPPORTED_EXTENSIONS = frozenset({*TEXT_TYPES, *CODE_TYPES, *HTML_TYPES, *JSON_TYPES, *BINARY_FORMATS})

MAX_DOCUMENT_BYTES_ENV = "CHUNKYARD_MAX_DOCUMENT_BYTES"
DEFAULT_MAX_DOCUMENT_BYTES = 20 * 1024 * 1024


def max_document_bytes() -> int:
    """The per-document size limit: `CHUNKYARD_MAX_DOCUMENT_BYTES` (bytes) or 20 MiB.

    It bounds memory per document (file bytes, and extracted text of as many characters).
    """
    return env_int(MAX_DOCUMENT_BYTES_ENV, DEFAULT_MAX_DOCUMENT_BYTES, unit="a number of bytes")


def load_folder(
    folder: str | os.PathLike[str],
    include: Sequence[str] = ("**/*",),
    exclude: Sequence[str] = (),
    *,
    max_bytes: int | None = None,
) -> tuple[list[Document], list[DocumentFailure]]:
    """Every included file under `folder` as a Document, plus a failure for each unusable one.

    `include`/`exclude` are globs on the relative POSIX path (`**` spans folders, `*` does
    not cross `/`). Hidden files and folders (names starting with `.`) are skipped unless a
    pattern names them explicitly. Results are sorted by document id. `max_bytes` defaults to
    `max_document_bytes()`.
    """
    scan = scan_folder(folder, include, exclude, max_bytes=max_bytes)
    return scan.documents, scan.failures


RACY_SECONDS = 2.0  # a file changed this recently may change again within one mtime tick
SIGNATURE_VERSION = "1"  # bump when a parser changes what a file yields, so every file is read again


def file_signature(info: os.stat_result, now_ns: int) -> str | None:
    """A file's stat signature, or None while a change within the same clock tick is possible."""
    racy_ns = int(RACY_SECONDS * 1e9)
    if now_ns - info.st_mtime_ns < racy_ns or now_ns - info.st_ctime_ns < racy_ns:
        return None
    return f"{SIGNATURE_VERSION}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"


def scan_folder(
    folder: str | os.PathLike[str],
    include: Sequence[str] = ("**/*",),
    exclude: Sequence[str] = (),
    *,
    known: Mapping[str, str] | None = None,
    max_bytes: int | None = None,
) -> FolderScan:
    """`load_folder`, leaving unread each file whose signature equals `known[its id]`.

    Same rules and order as `load_folder`; an unchanged file's id goes to `unchanged` instead of
    `documents`. Without `known` every file is read.
    """
    root = Path(folder)
    if not root.exists():
        return FolderScan(failures=[DocumentFailure(str(root), f"documents folder not found: {root}")])
    if not root.is_dir():
        return FolderScan(
            failures=[DocumentFailure(str(root), f"documents folder is not a directory: {root}")]
        )
    if not os.access(root, os.R_OK | os.X_OK):
        return FolderScan(
            failures=[
                DocumentFailure(str(root), f"documents folder is not readable (permission denied): {root}")
            ]
        )
    limit = max_document_bytes() if max_bytes is None else max_bytes
    known = known or {}
    now_ns = time.time_ns()
    real_root = Path(os.path.realpath(root))
    scan = FolderScan()
    walk_errors: list[OSError] = []
    for rel_path, entry in _scan(str(root), "", walk_errors):
        if not _selected(rel_path, include, exclude):
            continue
        try:
            info = _plain_file_stat(rel_path, entry)
            signature = file_signature(info, now_ns) if info is not None else None
            if signature is not None and known.get(rel_path) == signature and info.st_size <= limit:
                scan.unchanged.append(rel_path)  # unread: no path object, no realpath for it
                scan.signatures[rel_path] = signature
                continue
            target = (
                real_root / rel_path
                if info is not None
                else resolve_entry(real_root, rel_path, Path(entry.path))
            )
            scan.documents.append(_load(target, rel_path, limit, nofollow=True))
            if signature is not None:
                scan.signatures[rel_path] = signature
        except UnusableFile as exc:
            scan.failures.append(DocumentFailure(display_path(rel_path), str(exc)))
        except Exception as exc:  # per-file isolation: one file's parser bug never stops the others
            scan.failures.append(DocumentFailure(display_path(rel_path), f"cannot load: {_describe(exc)}"))
    for err in walk_errors:
        rel = _relative(root, Path(err.filename)) if err.filename else str(root)
        scan.failures.append(DocumentFailure(display_path(rel), f"cannot list folder: {err.strerror or err}"))
    scan.documents.sort(key=lambda d: d.id)
    scan.failures.sort(key=lambda f: f.path)
    scan.unchanged.sort()
    return scan


def _plain_file_stat(rel_path: str, entry: os.DirEntry[str]) -> os.stat_result | None:
    """The stat of a walked entry that is a regular file, no symlink, with a UTF-8 name; else None.

    Such a file, reached by a walk that never enters a symlinked folder, lies at `real_root/rel_path`:
    no realpath call is needed. For anything else (None) `resolve_entry` decides.
    """
    if entry.is_symlink():
        return None
    try:
        rel_path.encode("utf-8")
        info = entry.stat(follow_symlinks=False)
    except (UnicodeEncodeError, OSError):
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _readable_entry(real_root: Path, rel_path: str, entry: os.DirEntry[str]) -> Path:
    """`resolve_entry` for a walked entry, skipping realpath for a plain file (`_plain_file_stat`)."""
    if _plain_file_stat(rel_path, entry) is not None:
        return real_root / rel_path
    return resolve_entry(real_root, rel_path, Path(entry.path))


def list_files(
    folder: str | os.PathLike[str], include: Sequence[str] = ("**/*",), exclude: Sequence[str] = ()
) -> list[tuple[str, Path]]:
    """(document id, resolved path) of every file `load_folder` would read; [] for a missing folder.

    Entries `load_folder` refuses before reading (links leaving the folder, dangling or looping
    links, special files, names that are not UTF-8) are left out.
    """
    root = Path(folder)
    if not root.is_dir():
        return []
    real_root = Path(os.path.realpath(root))
    out: list[tuple[str, Path]] = []
    for rel, entry in _scan(str(root), "", []):
        if not _selected(rel, include, exclude):
            continue
        try:
            out.append((rel, _readable_entry(real_root, rel, entry)))
        except UnusableFile:
            continue
    return out


def resolve_entry(real_root: Path, rel_path: str, path: Path) -> Path:
    """The real path of a folder entry that may be read, or UnusableFile saying why not.

    The one rule for what a collection may read: a UTF-8 name, a regular file, and (after every
    symlink is resolved) a location inside the folder `real_root` (itself resolved).
    """
    try:
        rel_path.encode("utf-8")
    except UnicodeEncodeError:
        raise UnusableFile(
            f"file name is not valid UTF-8 ({display_path(rel_path)!r}); rename the file"
        ) from None
    is_link = path.is_symlink()
    try:
        real = Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnusableFile("symlink loop: the link never reaches a file") from None
        if is_link and exc.errno == errno.ENOENT:
            target = os.readlink(path)
            raise UnusableFile(f"dangling symlink: its target {target!r} does not exist") from None
        raise UnusableFile(f"cannot read file: {exc.strerror or exc}") from None
    if not real.is_relative_to(real_root):
        raise UnusableFile(
            f"symlink points outside the documents folder (to {real}): not read, for safety"
            if is_link
            else f"resolves outside the documents folder (to {real}): not read, for safety"
        )
    try:
        mode = real.stat().st_mode
    except OSError as exc:
        raise UnusableFile(f"cannot read file: {exc.strerror or exc}") from None
    if is_link and stat.S_ISDIR(mode):
        raise UnusableFile(
            "symlinked folder: not followed (a link may lead anywhere); add its target folder to the "
            "collection instead"
        )
    if not stat.S_ISREG(mode):
        raise UnusableFile(f"not a regular file ({_file_kind(mode)})")
    return real


def display_path(rel_path: str) -> str:
    """A path that is always valid UTF-8: undecodable bytes of the name escaped as `\\xff`."""
    try:
        rel_path.encode("utf-8")
        return rel_path
    except UnicodeEncodeError:
        return os.fsencode(rel_path).decode("utf-8", "backslashreplace")


def load_file(
    path: str | os.PathLike[str], doc_id: str | None = None, *, max_bytes: int | None = None
) -> Document:
    """Parse one file into a Document; raises `UnusableFile` (its message is the reason) when it cannot."""
    path = Path(path)
    limit = max_document_bytes() if max_bytes is None else max_bytes
    return _load(path, doc_id or path.name, limit, nofollow=False)


def _load(path: Path, doc_id: str, max_bytes: int, *, nofollow: bool) -> Document:
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
    if not data.strip():
        raise UnusableFile("empty file" if not data else "empty file (whitespace only)")
    metadata: dict = {"path": doc_id, "extension": ext, "size_bytes": len(data)}
    # untrusted structured formats parse under a time and memory bound, in a worker (parse_bounds)
    if ext in BINARY_FORMATS or ext in HTML_TYPES or ext in JSON_TYPES:
        text, mime, title, extra = run_bounded(parse_bytes, ext, data, path.name, warm_up="warm_parsers")
    else:
        text, mime, title, extra = parse_bytes(ext, data, path.name)
    metadata.update(extra)
    if not has_visible_text(text):
        raise UnusableFile("no visible text (only whitespace or invisible characters)")
    if len(text) > max_bytes:
        raise UnusableFile(
            f"extracted text has {len(text)} characters, over the limit of {max_bytes}"
            f" ({MAX_DOCUMENT_BYTES_ENV})"
        )
    return Document(doc_id, text, mime, title or path.stem, metadata)


def warm_parsers() -> None:
    """The bounded parsers' one-time initialisation (imports and data loaded on first use), run by a new
    parsing worker before its first file (chunking.parse_bounds)."""
    for ext, data in ((".html", b"<html><body><p>warm</p></body></html>"), (".json", b"{}")):
        parse_bytes(ext, data, "warm")
    with contextlib.suppress(UnusableFile):
        parse_bytes(".pdf", b"%PDF-1.4", "warm")


def parse_bytes(ext: str, data: bytes, name: str) -> tuple[str, str, str, dict]:
    """(text, mime type, title, extra metadata) of a file's bytes by its extension `ext`."""
    if ext in BINARY_FORMATS:
        mime, parse = BINARY_FORMATS[ext]
        text, title, extra = parse(data)
        return text, mime, title, extra
    text = decode_text(data)
    if ext in HTML_TYPES:
        text, title = parse_html(text)
        return text, HTML_TYPES[ext], title, {}
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
            raise UnusableFile(f"not a regular file ({_file_kind(info.st_mode)})")
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


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _describe(exc: BaseException) -> str:
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


_MD_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _markdown_title(text: str) -> str:
    match = _MD_HEADING.search(text)
    return match.group(1).strip() if match else ""


def _scan(folder: str, prefix: str, errors: list[OSError]) -> Iterable[tuple[str, os.DirEntry[str]]]:
    """(relative POSIX path, entry) of every non-folder entry under `folder`, sorted like `os.walk`
    with sorted names (a folder's files, then its sub-folders); symlinked folders are not followed
    (they come out as entries, so the skip is reported).

    Files, symlinks (to files, dangling or looping) and special files all come out: `resolve_entry`
    decides which may be read. A folder that cannot be listed is reported in `errors`.
    """
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        errors.append(exc)
        return
    folders = []
    for entry in entries:
        try:
            is_folder = entry.is_dir()
        except OSError:
            is_folder = False
        if is_folder and not entry.is_symlink():
            folders.append(entry)
        else:  # files, and symlinked folders: not entered, but reported (`resolve_entry`)
            yield prefix + entry.name, entry
    for entry in folders:
        yield from _scan(entry.path, f"{prefix}{entry.name}/", errors)


def _relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _selected(rel_path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    hidden = rel_path.startswith(".") or "/." in rel_path  # a name (file or folder) starting with "."
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
