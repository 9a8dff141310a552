"""Open a path that was resolved earlier without following any symlink that appeared on it since.

`resolve_entry` decides that a file lies inside the documents folder, but a folder can change between
that check and the read: a subfolder swapped for a symlink to `/etc` would lead the read outside it,
and `O_NOFOLLOW` guards only the last component. So a resolved path (which holds no symlink by
construction) is opened one component at a time from `/`, each with `O_NOFOLLOW` relative to the
folder opened before it (`openat`): any component that is a symlink now is refused, never followed.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# O_PATH (Linux): folders on the way need only search permission, as a plain open of the path does.
_DIR_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)


class PathChanged(OSError):
    """A component of a resolved path is a symlink now (or no longer a folder): refused, not followed."""


def open_resolved(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """A file descriptor for the absolute, resolved `path`, opened with `flags`; `PathChanged` when a
    component has become a symlink since it was resolved, OSError as `os.open` otherwise."""
    parts = Path(path).parts
    if not parts or parts[0] != "/":
        raise ValueError(f"path: expected an absolute resolved path, got {os.fspath(path)!r}")
    folder = os.open("/", _DIR_FLAGS)
    try:
        for depth, part in enumerate(parts[1:-1], start=1):
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _changed(parts[: depth + 1], "folder") from None
                raise
            os.close(folder)
            folder = inner
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _changed(parts, "file") from None
            raise
    finally:
        os.close(folder)


def _changed(parts: tuple[str, ...], what: str) -> PathChanged:
    where = Path(*parts)
    return PathChanged(
        errno.ELOOP, f"{where} became a symlink (or stopped being a {what}) since it was listed"
    )
