"""A collection's documents: the ONE rule for which files it has, their ids and their content hashes.

Both the documents step (which loads and syncs them) and the document sensor (which only needs their
content hashes to notice changes) load them through `load_folders`, so their ids and hashes always
agree: with several folders, a document id is prefixed with its folder's name so ids stay unique; a
document's content hash is `Document.sha256`, the sha256 of its decoded text. Both also trust a file's
stat signature (`chunking.documents.folder.file_signature`): a file whose signature is unchanged is read
again neither by the step nor by the sensor.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chunkyard.chunking.documents.folder import DocumentFailure, file_signature, scan_folder
from chunkyard.chunking.types import Document
from chunkyard.retrieval.settings.config import Collection


@dataclass
class CollectionDocuments:
    """What loading a collection gave: documents, files that gave none, and whether any folder was
    readable (when none is, the stored documents are kept rather than deleted)."""

    documents: list[Document] = field(default_factory=list)
    failures: list[DocumentFailure] = field(default_factory=list)
    usable: bool = True
    unchanged: list[str] = field(default_factory=list)  # ids left unread: their file signature matched
    signatures: dict[str, str] = field(
        default_factory=dict
    )  # id -> file signature (chunking.documents.folder)
    failed_paths: dict[str, Path] = field(default_factory=dict)  # failure id -> its file or folder

    @property
    def total(self) -> int:
        """Documents the collection has now: those read plus those unchanged."""
        return len(self.documents) + len(self.unchanged)


def folder_prefix(folder: Path, folders: list[Path]) -> str:
    """The id prefix of a folder's documents: its name when the collection has several folders."""
    return f"{folder.name}/" if len(folders) > 1 else ""


def load_collection_documents(
    collection: Collection,
    known: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CollectionDocuments:
    """Load a collection's documents from its dataset or its folders (`load_folders`).

    `known` ({document id: file signature}, from the store) leaves unchanged files unread;
    `progress(done, total)` follows the files of each folder.
    """
    if collection.dataset:
        from chunkyard.evaluation.datasets import load_dataset

        return CollectionDocuments(list(load_dataset(collection.dataset).documents))
    return load_folders(collection, known, progress)


def load_folders(
    collection: Collection,
    known: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CollectionDocuments:
    """Load the documents of a collection's folders (`scan_folder`), with their ids (see the module)."""
    folders = collection.folder_paths()
    loaded = CollectionDocuments(usable=False)
    for folder in folders:
        prefix = folder_prefix(folder, folders)
        folder_known = {k[len(prefix) :]: v for k, v in (known or {}).items() if k.startswith(prefix)}
        scan = scan_folder(
            folder,
            collection.include,
            collection.exclude,
            known=folder_known,
            progress=progress,
            ocr=collection.ocr,
        )
        fails = scan.failures
        folder_failed = bool(fails) and fails[0].path == str(folder)
        loaded.usable = loaded.usable or not folder_failed
        for doc in scan.documents:
            if prefix:
                doc = Document(prefix + doc.id, doc.text, doc.mime_type, doc.title, dict(doc.metadata))
            loaded.documents.append(doc)
        loaded.unchanged.extend(prefix + doc_id for doc_id in scan.unchanged)
        loaded.signatures.update({prefix + k: v for k, v in scan.signatures.items()})
        for fail in fails:
            if fail.path == str(folder):
                # Keyed by the folder's id prefix, so the store keeps that folder's documents.
                failure = DocumentFailure(prefix.rstrip("/") or str(folder), fail.reason)
                loaded.failed_paths[failure.path] = folder
            else:
                failure = DocumentFailure(prefix + fail.path, fail.reason)
                loaded.failed_paths[failure.path] = folder / fail.path
            loaded.failures.append(failure)
    return loaded


FAILED_PREFIX = "failed:"  # a failure fingerprint's prefix; a Document.sha256 is bare hex


def failure_fingerprint(reason: str, path: Path) -> str:
    """The stand-in content hash of a file (or folder) that gives no document: its failure reason and
    its own stat (size, mtime, ctime, inode; `lstat`, never a link's target).

    A change to a failing file (or to why it fails) changes it, so the sensor still requests a run,
    which records the failure; an unchanged failing file keeps it, so it requests nothing more. It
    never equals a `Document.sha256`, so a failing file that loads again is a change too.
    """
    try:
        info = os.lstat(path)
        stat_text = f"{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"
    except OSError as exc:
        stat_text = f"no stat: {exc.strerror or exc}"
    digest = hashlib.sha256(f"{reason}\0{stat_text}".encode("utf-8", "surrogatepass")).hexdigest()
    return FAILED_PREFIX + digest


@dataclass
class FolderHashes:
    """A collection's content hash by document id (`Document.sha256`, or `failure_fingerprint` for a
    file that gives none), and the stat signatures under which they may be reused next time."""

    hashes: dict[str, str] = field(default_factory=dict)
    signatures: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # id -> reason, of those loaded this time
    loaded: int = 0  # files (or folders) loaded this time; the others kept their hash (same signature)


def hash_folder(collection: Collection, known: FolderHashes | None = None) -> FolderHashes:
    """The content hash of every document of the collection's folders, loaded as the documents step
    loads them (`load_folders`), reading only the files whose stat signature differs from `known`
    (all of them without it). A file that fails to load gets `failure_fingerprint`; its signature is
    kept too, so an unchanged failing file is not read again either.
    """
    now_ns = time.time_ns()  # before loading: a file written since has a signature too young to trust
    previous = known.hashes if known is not None else {}
    trusted = {k: v for k, v in known.signatures.items() if k in previous} if known is not None else {}
    loaded = load_folders(collection, trusted)
    current = FolderHashes(loaded=len(loaded.documents) + len(loaded.failures))
    for doc_id in loaded.unchanged:
        current.hashes[doc_id] = previous[doc_id]
        current.signatures[doc_id] = loaded.signatures[doc_id]
    for doc in loaded.documents:
        current.hashes[doc.id] = doc.sha256
        if doc.id in loaded.signatures:
            current.signatures[doc.id] = loaded.signatures[doc.id]
    for failure in loaded.failures:
        path = loaded.failed_paths[failure.path]
        current.hashes[failure.path] = failure_fingerprint(failure.reason, path)
        current.failures[failure.path] = failure.reason
        try:
            info = os.lstat(path)
        except OSError:
            continue
        signature = file_signature(info, now_ns) if stat.S_ISREG(info.st_mode) else None
        if signature is not None:
            current.signatures[failure.path] = signature
    return current
