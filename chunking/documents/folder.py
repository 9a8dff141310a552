"""Read a folder of files into Documents; every file that cannot be used becomes a DocumentFailure.

Pure file parsing (no Dagster, no database). A bad file never stops the others: a missing
folder, an empty file, bytes that are not UTF-8, a broken PDF or an unsupported type each
yield a `DocumentFailure(path, reason)` with a reason an operator can act on, and so does any
other exception a parser raises on one file. What may be read is `chunking.documents.walk`'s
rule; how one file is read, `chunking.documents.files`.

Document ids are the POSIX path of the file relative to the folder (`guide/intro.md`), so
the same file keeps its id across runs and machines.

`scan_folder` also skips reading a file whose stat signature (size, mtime, ctime, inode) equals the
one recorded when it was last read, as git's index does: a one-document update of a large folder
then reads one file. A signature from within `RACY_SECONDS` of the scan is not recorded, so a file
rewritten twice within one clock tick is still read again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.files import max_document_bytes, read_document
from chunkyard.chunking.documents.walk import (
    UnlistedFolder,
    display_path,
    plain_file_stat,
    resolve_entry,
    selected,
    walk_entries,
)
from chunkyard.chunking.types import Document


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
SIGNATURE_VERSION = "2"  # bump when a parser changes what a file yields, so every file is read again


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
    progress: Callable[[int, int], None] | None = None,
    ocr: bool = True,
) -> FolderScan:
    """`load_folder`, leaving unread each file whose signature equals `known[its id]`.

    Same rules and order as `load_folder`; an unchanged file's id goes to `unchanged` instead of
    `documents`. Without `known` every file is read. `progress(done, total)` is called after each
    selected file (the folder is listed first, so the total is known). `ocr=False` leaves scanned
    pages and image files unread (a collection's `ocr: false`).
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
    unlisted: list[UnlistedFolder] = []
    entries = list(walk_entries(real_root, unlisted, lambda rel: selected(rel, include, exclude)))
    for done, entry in enumerate(entries, 1):
        rel_path = entry.rel_path
        if progress is not None:
            progress(done - 1, len(entries))
        try:
            info = plain_file_stat(rel_path, entry)
            signature = file_signature(info, now_ns) if info is not None else None
            if signature is not None and known.get(rel_path) == signature and info.st_size <= limit:
                scan.unchanged.append(rel_path)  # unread: no path object, no realpath for it
                scan.signatures[rel_path] = signature
                for child in _attachment_ids(known, rel_path, signature):  # unread with their mail
                    scan.unchanged.append(child)
                    scan.signatures[child] = signature
                continue
            target = real_root / rel_path if info is not None else resolve_entry(real_root, entry)
            attachments: list[Document] = []  # a mail's attached files: documents of their own
            scan.documents.append(
                read_document(target, rel_path, limit, nofollow=True, ocr=ocr, attachments=attachments)
            )
            scan.documents.extend(attachments)
            if signature is not None:
                scan.signatures[rel_path] = signature
                scan.signatures.update({a.id: signature for a in attachments})
        except UnusableFile as exc:
            scan.failures.append(DocumentFailure(display_path(rel_path), str(exc)))
        except Exception as exc:  # per-file isolation: one file's parser bug never stops the others
            scan.failures.append(DocumentFailure(display_path(rel_path), f"cannot load: {_describe(exc)}"))
    if progress is not None:
        progress(len(entries), len(entries))
    for folder_problem in unlisted:  # a sub-folder's failure keeps its stored documents (Documents.sync)
        rel = folder_problem.rel_path or str(root)
        scan.failures.append(DocumentFailure(display_path(rel), folder_problem.reason))
    scan.documents.sort(key=lambda d: d.id)
    scan.failures.sort(key=lambda f: f.path)
    scan.unchanged.sort()
    return scan


def _attachment_ids(known: Mapping[str, str], rel_path: str, signature: str) -> list[str]:
    """The known documents attached to file `rel_path` (`<id>/<name>`, recorded under its signature)."""
    if not rel_path.endswith(".eml"):
        return []
    prefix = rel_path + "/"
    return [doc_id for doc_id, sig in known.items() if doc_id.startswith(prefix) and sig == signature]


def _describe(exc: BaseException) -> str:
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
