"""The folder walk never leaves the folder (issue 41 #2): a sub-folder swapped for a symlink between the
listing of its parent and its own is refused under its own name, never entered; no name or path from
outside the folder reaches a listing, a skip reason or the store, and no document under the swapped
folder is deleted meanwhile."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

import chunkyard.chunking.documents.folder as folder
import pytest
from chunkyard.chunking.documents.folder import FolderScan, scan_folder
from chunkyard.chunking.documents.walk import list_files

SECRET = "TOPSECRET outside the documents folder"
OUTSIDE_NAME = "outside-only-name"


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "docs", tmp_path / "elsewhere"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nA plain document.\n")
    (root / "sub" / "b.md").write_text("# B\n\nA document inside the sub-folder.\n")
    (root / "sub" / "c.md").write_text("# C\n\nAnother document inside the sub-folder.\n")
    outside.mkdir()
    (outside / "b.md").write_text(f"# B\n\n{SECRET}\n")
    (outside / f"{OUTSIDE_NAME}.md").write_text(f"# Outside\n\n{SECRET}\n")
    (outside / f"{OUTSIDE_NAME}-link.md").symlink_to("/etc/hostname")
    return root, outside


def _outside_mentions(scan: FolderScan, outside: Path) -> list[str]:
    """Every id, failure path or reason of `scan` that names something outside the folder."""
    texts = [d.id for d in scan.documents] + list(scan.unchanged)
    texts += [f.path for f in scan.failures] + [f.reason for f in scan.failures]
    texts += [d.text for d in scan.documents]
    marks = (OUTSIDE_NAME, str(outside), outside.name, SECRET, "/etc/hostname")
    return [t for t in texts if any(m in t for m in marks)]


def _would_delete(scan: FolderScan, ids: list[str]) -> list[str]:
    """The ids a sync of `scan` would delete: neither read, unchanged, nor under a failure's path."""
    given = {d.id for d in scan.documents} | set(scan.unchanged)
    failed = [f.path for f in scan.failures]
    return [i for i in ids if i not in given and not any(i == p or i.startswith(p + "/") for p in failed)]


def test_a_subfolder_swapped_for_a_symlink_after_its_parent_was_listed_is_not_entered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = _layout(tmp_path)
    selected = folder.selected

    def swap_after_the_root_listing(rel_path: str, include, exclude) -> bool:
        if rel_path == "a.md" and not (root / "sub").is_symlink():  # the root was listed: sub is a folder
            (root / "sub").rename(tmp_path / "parked")
            (root / "sub").symlink_to(outside, target_is_directory=True)
        return selected(rel_path, include, exclude)

    monkeypatch.setattr(folder, "selected", swap_after_the_root_listing)
    scan = scan_folder(root)
    assert (root / "sub").is_symlink()
    assert _outside_mentions(scan, outside) == []
    assert [d.id for d in scan.documents] == ["a.md"]
    (failure,) = scan.failures
    assert failure.path == "sub"
    assert "became a symlink" in failure.reason and "not followed" in failure.reason, failure.reason
    assert _would_delete(scan, ["a.md", "sub/b.md", "sub/c.md"]) == []


def test_a_swapped_subfolder_keeps_its_stored_documents(tmp_path: Path, store) -> None:
    """Synced into the real store, the scan of a swapped folder deletes nothing and stores no outside name."""
    root, outside = _layout(tmp_path)
    first = scan_folder(root)
    store.documents.sync("walk-race", first.documents, first.failures)
    (root / "sub").rename(tmp_path / "parked")
    (root / "sub").symlink_to(outside, target_is_directory=True)
    swapped = scan_folder(root)
    sync = store.documents.sync("walk-race", swapped.documents, swapped.failures)
    assert sync.deleted == []
    assert sorted(store.documents.hashes("walk-race")) == ["a.md", "sub/b.md", "sub/c.md"]
    assert _outside_mentions(swapped, outside) == []


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): `a` is never missing, only swapped."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def test_scans_against_a_racing_swap_never_list_an_outside_name(tmp_path: Path) -> None:
    """A thread swaps the sub-folder and a symlink to the outside folder as fast as it can while the
    folder is scanned and listed 300 times: no outside name, no outside byte, no would-be deletion."""
    root, outside = _layout(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(outside, target_is_directory=True)
    try:
        _exchange(root / "sub", link)
        _exchange(root / "sub", link)
    except (OSError, AttributeError) as exc:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available here: {exc}")
    stop = threading.Event()

    def racer() -> None:
        while not stop.is_set():
            _exchange(root / "sub", link)

    thread = threading.Thread(target=racer, daemon=True)
    thread.start()
    mentions, deleted, listed_outside, swapped = [], [], [], 0
    try:
        for _ in range(300):
            scan = scan_folder(root)
            mentions += _outside_mentions(scan, outside)
            deleted += _would_delete(scan, ["a.md", "sub/b.md", "sub/c.md"])
            listed_outside += [rel for rel, _ in list_files(root) if OUTSIDE_NAME in rel]
            swapped += any(f.path.startswith("sub") for f in scan.failures)
    finally:
        stop.set()
        thread.join()
    assert mentions == [] and listed_outside == []
    assert deleted == []
    assert swapped > 0  # the race was run: some scans met the swapped folder
