"""A folder that changes while it is read never leads outside it: a subfolder swapped for a symlink to
another folder between the listing and the read is refused, on every component, not only the last."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import chunkyard.chunking.documents.folder as folder
import pytest
from chunkyard.chunking.documents.folder import scan_folder
from chunkyard.chunking.documents.safe_open import PathChanged, open_resolved
from chunkyard.chunking.types import sha256_text
from chunkyard.pipeline.documents import FAILED_PREFIX, hash_folder
from chunkyard.retrieval.settings.config import Collection

SECRET = "TOPSECRET outside the documents folder"


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "docs", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nA plain document.\n")
    (root / "sub" / "b.md").write_text("# B\n\nThe listed file inside the folder.\n")
    outside.mkdir()
    (outside / "b.md").write_text(f"# B\n\n{SECRET}\n")
    return root, outside


def _swap(root: Path, outside: Path) -> None:
    """`sub` becomes a symlink to `outside`, which holds a `b.md` of its own."""
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(outside, target_is_directory=True)


def test_a_subfolder_swapped_for_a_symlink_between_scan_and_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = _layout(tmp_path)
    listed = folder.plain_file_stat

    def swap_after_listing(rel_path: str, entry: os.DirEntry[str]):
        info = listed(rel_path, entry)  # the scan saw a plain file in a plain folder...
        if rel_path == "sub/b.md" and not (root / "sub").is_symlink():
            _swap(root, outside)  # ...and the folder changes before the read
        return info

    monkeypatch.setattr(folder, "plain_file_stat", swap_after_listing)
    scan = scan_folder(root)
    assert (root / "sub").is_symlink()
    assert [d.id for d in scan.documents] == ["a.md"]
    assert all(SECRET not in d.text for d in scan.documents)
    (failure,) = scan.failures
    assert failure.path == "sub/b.md"
    assert "became a symlink" in failure.reason and "not followed" in failure.reason, failure.reason


def test_the_sensor_never_hashes_a_file_outside_through_a_swapped_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sensor loads files through the step's own loader: the swapped file is a failure (its
    fingerprint a failure's), never the content hash of the file outside."""
    root, outside = _layout(tmp_path)
    watched = Collection(name="swap", folders=(str(root),))
    inside = hash_folder(watched).hashes["sub/b.md"]
    assert inside == sha256_text((root / "sub" / "b.md").read_text())
    listed = folder.plain_file_stat

    def swap_after_listing(rel_path: str, entry: os.DirEntry[str]):
        info = listed(rel_path, entry)
        if rel_path == "sub/b.md" and not (root / "sub").is_symlink():
            _swap(root, outside)
        return info

    monkeypatch.setattr(folder, "plain_file_stat", swap_after_listing)
    swapped = hash_folder(watched)
    assert swapped.hashes["sub/b.md"].startswith(FAILED_PREFIX), swapped.hashes
    assert "became a symlink" in swapped.failures["sub/b.md"]
    assert sha256_text((outside / "b.md").read_text()) not in swapped.hashes.values()


def test_open_resolved_refuses_a_symlink_on_any_component(tmp_path: Path) -> None:
    root, outside = _layout(tmp_path)
    real = (root / "sub" / "b.md").resolve()
    os.close(open_resolved(real))  # a plain resolved path opens
    (root / "link.md").symlink_to(root / "a.md")
    with pytest.raises(PathChanged, match="link.md"):  # the last component
        open_resolved(root.resolve() / "link.md")
    _swap(root, outside)
    with pytest.raises(PathChanged, match="sub"):  # a folder on the way
        open_resolved(real)
    with pytest.raises(ValueError, match="path"):
        open_resolved(Path("docs/a.md"))
