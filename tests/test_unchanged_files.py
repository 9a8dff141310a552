"""A folder sync reads only files whose stat signature changed; every other outcome stays as before."""

from __future__ import annotations

import os
from pathlib import Path

import chunkyard.chunking.documents.folder as folder_scan
import pytest
from chunkyard.chunking.documents.folder import file_signature, scan_folder
from chunkyard.pipeline.steps.documents import sync_documents
from chunkyard.retrieval.settings.config import Collection
from chunkyard.retrieval.store.documents import StaleSignatures


@pytest.fixture
def trusted_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust signatures of files written a moment ago (a test cannot wait out the racy window)."""
    monkeypatch.setattr(folder_scan, "RACY_SECONDS", 0.0)


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# Alpha\n\nAlpacas graze on the altiplano.\n")
    (folder / "b.md").write_text("# Beta\n\nBeetles outnumber every other order of animals.\n")
    (folder / "sub" / "c.txt").write_text("Cormorants dive for fish in cold water.\n")
    return folder


def test_a_file_written_within_the_racy_window_gets_no_signature(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    scan = scan_folder(folder)
    assert scan.signatures == {}  # just written: a second write in the same clock tick is possible
    info = os.stat(folder / "a.md")
    later = (
        info.st_mtime_ns
        + int(folder_scan.RACY_SECONDS * 1e9)
        + max(0, info.st_ctime_ns - info.st_mtime_ns)
        + 1
    )
    assert file_signature(info, later) is not None


def test_scan_leaves_files_with_a_known_signature_unread(tmp_path: Path, trusted_now: None) -> None:
    folder = _folder(tmp_path)
    first = scan_folder(folder)
    assert [d.id for d in first.documents] == ["a.md", "b.md", "sub/c.txt"]
    assert set(first.signatures) == {"a.md", "b.md", "sub/c.txt"}

    second = scan_folder(folder, known=first.signatures)
    assert second.documents == [] and second.unchanged == ["a.md", "b.md", "sub/c.txt"]

    (folder / "b.md").write_text("# Beta\n\nBeetles outnumber all other animal orders, by far.\n")
    third = scan_folder(folder, known=first.signatures)
    assert [d.id for d in third.documents] == ["b.md"] and third.unchanged == ["a.md", "sub/c.txt"]
    stale = {k: v.replace(f"{folder_scan.SIGNATURE_VERSION}:", "0:", 1) for k, v in third.signatures.items()}
    assert len(scan_folder(folder, known=stale).documents) == 3  # another parser version reads all
    # a lower size limit is never skipped past: the file is read and refused
    refused = scan_folder(folder, known=third.signatures, max_bytes=20)
    assert {f.path for f in refused.failures} == {"a.md", "b.md", "sub/c.txt"}


def test_the_documents_step_reads_only_changed_files(store, tmp_path: Path, trusted_now: None) -> None:
    folder = _folder(tmp_path)
    collection = Collection(name="unchanged-files", folders=(str(folder),))

    first = sync_documents(store, collection).metadata
    assert (first["documents_added"], first["documents_read"], first["documents_total"]) == (3, 3, 3)
    again = sync_documents(store, collection).metadata
    assert (again["documents_read"], again["documents_unchanged"], again["documents_total"]) == (0, 3, 3)

    (folder / "a.md").write_text("# Alpha\n\nAlpacas graze on the altiplano of the Andes.\n")
    (folder / "sub" / "c.txt").unlink()
    changed = sync_documents(store, collection)
    assert changed.ids == {"added_ids": [], "changed_ids": ["a.md"], "deleted_ids": ["sub/c.txt"]}
    assert changed.metadata["documents_read"] == 1
    assert "Andes" in store.documents.read(collection.name, ["a.md"])[0].text

    os.utime(folder / "b.md")  # touched, same bytes: read once, unchanged, its new signature kept
    touched = sync_documents(store, collection).metadata
    assert (touched["documents_read"], touched["documents_changed"]) == (1, 0)
    assert sync_documents(store, collection).metadata["documents_read"] == 0


def test_unread_documents_deleted_meanwhile_make_the_step_read_every_file(
    store, tmp_path: Path, trusted_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path)
    collection = Collection(name="unchanged-files-race", folders=(str(folder),))
    sync_documents(store, collection)
    with pytest.raises(StaleSignatures):
        store.documents.sync(collection.name, [], unchanged=["ghost.md"])
    # another writer removes a document between the step's read of the signatures and its sync
    signatures_before = store.documents.signatures(collection.name)
    with store.connection() as conn:
        conn.execute("DELETE FROM documents WHERE collection = %s AND doc_id = 'a.md'", (collection.name,))
    monkeypatch.setattr(store.documents, "signatures", lambda _name: signatures_before)
    report = sync_documents(store, collection).metadata
    assert (report["documents_added"], report["documents_read"]) == (1, 3)
    assert sorted(store.documents.hashes(collection.name)) == ["a.md", "b.md", "sub/c.txt"]
