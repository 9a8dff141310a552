"""A collection's documents: the ONE rule for which files it has, their ids and their content hashes.

Both the documents step (which loads and syncs them) and the document sensor (which only hashes
files to notice changes) go through `collection_files`, so their ids always agree: with several
folders, a document id is prefixed with its folder's name so ids stay unique. Both also trust a
file's stat signature (`chunking.documents.folder.file_signature`) as the run does: a file whose signature
is unchanged is neither read again by the step nor hashed again by the sensor.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chunking.documents.folder import DocumentFailure, file_signature, scan_folder
from chunking.documents.safe_open import open_resolved
from chunking.documents.walk import list_files
from chunking.types import Document
from retrieval.config import Collection


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

    @property
    def total(self) -> int:
        """Documents the collection has now: those read plus those unchanged."""
        return len(self.documents) + len(self.unchanged)


def folder_prefix(folder: Path, folders: list[Path]) -> str:
    """The id prefix of a folder's documents: its name when the collection has several folders."""
    return f"{folder.name}/" if len(folders) > 1 else ""


def collection_files(collection: Collection) -> Iterator[tuple[str, Path]]:
    """(document id, path) of every file the collection's folders include."""
    folders = collection.folder_paths()
    for folder in folders:
        prefix = folder_prefix(folder, folders)
        for doc_id, path in list_files(folder, collection.include, collection.exclude):
            yield prefix + doc_id, Path(path)


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks; `path` is resolved (`list_files`), so a symlink
    on it since is refused (OSError), never followed outside the folder."""
    digest = hashlib.sha256()
    with os.fdopen(open_resolved(Path(path).absolute(), os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class FolderHashes:
    """Every file's sha256 by document id, and the stat signatures that may be trusted next time."""

    hashes: dict[str, str] = field(default_factory=dict)
    signatures: dict[str, str] = field(default_factory=dict)
    hashed: int = 0  # files read this time; the others kept their hash (same signature)


def hash_folder(collection: Collection, known: FolderHashes | None = None) -> FolderHashes:
    """The sha256 of every file the collection would load, reading only files whose stat signature
    differs from `known` (all of them without it).

    A file that vanishes or cannot be read mid-scan is left out (it is seen on a later scan).
    """
    current = FolderHashes()
    now_ns = time.time_ns()
    for doc_id, path in collection_files(collection):
        try:
            signature = file_signature(os.stat(path), now_ns)  # before reading: a later write changes it
            if known is not None and signature is not None and known.signatures.get(doc_id) == signature:
                previous = known.hashes.get(doc_id)
                if previous is not None:
                    current.hashes[doc_id] = previous
                    current.signatures[doc_id] = signature
                    continue
            current.hashes[doc_id] = file_sha256(path)
            current.hashed += 1
        except OSError:
            continue
        if signature is not None:
            current.signatures[doc_id] = signature
    return current


def load_collection_documents(
    collection: Collection,
    known: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CollectionDocuments:
    """Load a collection's documents from its dataset or its folders (ids as `collection_files`).

    `known` ({document id: file signature}, from the store) leaves unchanged files unread;
    `progress(done, total)` follows the files of each folder.
    """
    if collection.dataset:
        from evaluation.datasets import load_dataset

        return CollectionDocuments(list(load_dataset(collection.dataset).documents))
    folders = collection.folder_paths()
    loaded = CollectionDocuments(usable=False)
    for folder in folders:
        prefix = folder_prefix(folder, folders)
        folder_known = {k[len(prefix) :]: v for k, v in (known or {}).items() if k.startswith(prefix)}
        scan = scan_folder(
            folder, collection.include, collection.exclude, known=folder_known, progress=progress
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
                loaded.failures.append(DocumentFailure(prefix.rstrip("/") or str(folder), fail.reason))
            else:
                loaded.failures.append(DocumentFailure(prefix + fail.path, fail.reason))
    return loaded
