"""Walking a documents folder: which entries are selected by glob, and which may be read safely.

Nothing outside the folder is ever read or listed. The walk opens each sub-folder relative to its
parent's descriptor with `O_NOFOLLOW | O_DIRECTORY` (`openat`), so a sub-folder swapped for a symlink
between the parent's listing and its own is refused (reported under its own name), never entered; a
symlink entry is resolved and refused when its target lies outside the folder (or dangles, or
loops). No reason names anything outside the folder: not a link's target, not a resolved path.
`list_files` applies the same rule (`resolve_entry`) as `chunking.documents.folder.scan_folder`.
A name that is not valid UTF-8 cannot be an id: it is reported under its escaped form (`bad\\xff.txt`).

`os.fwalk` (Python 3.11) opens a sub-folder following links and drops it without a word when it is
not the folder listed; here it is reported, so its documents are kept, not deleted (`Documents.sync`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.safe_open import open_resolved

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True)
class FolderEntry:
    """A non-folder entry of a walked folder: its relative POSIX path and its own stat when listed
    (`lstat`: a symlink's, never its target's; None when it vanished before it could be stat'ed)."""

    rel_path: str
    info: os.stat_result | None

    @property
    def is_symlink(self) -> bool:
        return self.info is not None and stat.S_ISLNK(self.info.st_mode)


@dataclass(frozen=True)
class UnlistedFolder:
    """A folder the walk could not list, by its relative POSIX path ("" for the folder itself), and why."""

    rel_path: str
    reason: str


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
    for entry in walk_entries(real_root, [], lambda rel: selected(rel, include, exclude)):
        try:
            out.append((entry.rel_path, readable_entry(real_root, entry)))
        except UnusableFile:
            continue
    return out


def resolve_entry(real_root: Path, entry: FolderEntry) -> Path:
    """The real path of a folder entry that may be read, or UnusableFile saying why not.

    The one rule for what a collection may read: a UTF-8 name, a regular file, and (after every
    symlink is resolved) a location inside the folder `real_root` (itself resolved). The reason
    never names the place outside: a link's target is the folder's own text, but what it resolves
    to (or what a folder swapped since the listing leads to) is not.
    """
    rel_path = entry.rel_path
    try:
        rel_path.encode("utf-8")
    except UnicodeEncodeError:
        raise UnusableFile(
            f"file name is not valid UTF-8 ({display_path(rel_path)!r}); rename the file"
        ) from None
    is_link = entry.is_symlink
    try:
        real = Path(os.path.realpath(real_root / rel_path, strict=True))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnusableFile("symlink loop: the link never reaches a file") from None
        if is_link and exc.errno == errno.ENOENT:
            raise UnusableFile("dangling symlink: its target does not exist") from None
        raise UnusableFile(f"cannot read file: {exc.strerror or exc}") from None
    if not real.is_relative_to(real_root):
        raise UnusableFile(
            "symlink points outside the documents folder: not read, for safety"
            if is_link
            else "resolves outside the documents folder (a folder on its path became a symlink since"
            " it was listed): not read, for safety"
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
        raise UnusableFile(f"not a regular file ({file_kind(mode)})")
    return real


def display_path(rel_path: str) -> str:
    """A path that is always valid UTF-8: undecodable bytes of the name escaped as `\\xff`."""
    try:
        rel_path.encode("utf-8")
        return rel_path
    except UnicodeEncodeError:
        return os.fsencode(rel_path).decode("utf-8", "backslashreplace")


def plain_file_stat(rel_path: str, entry: FolderEntry) -> os.stat_result | None:
    """The stat of a walked entry that is a regular file, no symlink, with a UTF-8 name; else None.

    Such a file, reached by a walk that never enters a symlinked folder, lies at `real_root/rel_path`:
    no realpath call is needed. For anything else (None) `resolve_entry` decides.
    """
    info = entry.info
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    try:
        rel_path.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return info


def readable_entry(real_root: Path, entry: FolderEntry) -> Path:
    """`resolve_entry` for a walked entry, skipping realpath for a plain file (`plain_file_stat`)."""
    if plain_file_stat(entry.rel_path, entry) is not None:
        return real_root / entry.rel_path
    return resolve_entry(real_root, entry)


def file_kind(mode: int) -> str:
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


class _OpenFolder:
    """A listed folder's descriptor, held until the last of its sub-folders has been opened from it."""

    def __init__(self, fd: int, children: int) -> None:
        self.fd, self.children = fd, children

    def child_opened(self) -> None:
        self.children -= 1
        if self.children == 0:
            os.close(self.fd)


def walk_entries(
    real_root: Path, unlisted: list[UnlistedFolder], wanted: Callable[[str], bool] | None = None
) -> Iterator[FolderEntry]:
    """Every non-folder entry under the resolved folder `real_root`, sorted like `os.walk` with sorted
    names (a folder's files, then its sub-folders, each in full); symlinked folders are not followed
    (they come out as entries, so the skip is reported).

    Each sub-folder is opened from its parent's descriptor with no-follow: one that became a symlink
    (or stopped being a folder) since its parent was listed is not entered but reported in `unlisted`,
    as is a folder that cannot be listed. At most one descriptor per level of depth is open. Only the
    entries whose relative path `wanted` accepts (all without it) come out, and only they are stat'ed.
    """
    try:
        root_fd = open_resolved(real_root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        unlisted.append(UnlistedFolder("", f"cannot list folder: {exc.strerror or exc}"))
        return
    pending: list[tuple[_OpenFolder, str, str]] = []  # (parent, name, relative path) to open
    fd: int | None = root_fd
    rel = ""
    try:
        while fd is not None or pending:
            if fd is None:
                parent, name, rel = pending.pop()
                try:
                    fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent.fd)
                except OSError as exc:
                    unlisted.append(UnlistedFolder(rel, _unopened(exc)))
                    continue
                finally:
                    parent.child_opened()
            prefix = f"{rel}/" if rel else ""
            try:
                files, folders = _list_folder(fd, prefix, wanted)
            except OSError as exc:
                unlisted.append(UnlistedFolder(rel, f"cannot list folder: {exc.strerror or exc}"))
                files, folders = [], []  # nothing of it listed
            if folders:  # held until the last sub-folder is opened from it
                opened = _OpenFolder(fd, len(folders))
                pending.extend((opened, sub, prefix + sub) for sub in reversed(folders))
            else:
                os.close(fd)
            fd = None
            yield from files
    finally:  # an abandoned walk closes what it still holds
        if fd is not None:
            os.close(fd)
        for parent, _name, _rel in pending:
            if parent.children > 0:
                parent.children = 0
                os.close(parent.fd)


def _list_folder(
    fd: int, prefix: str, wanted: Callable[[str], bool] | None
) -> tuple[list[FolderEntry], list[str]]:
    """(the wanted non-folder entries, the names of the plain sub-folders) of the open folder `fd`, sorted."""
    with os.scandir(fd) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    files: list[FolderEntry] = []
    folders: list[str] = []
    for entry in entries:
        try:
            is_folder = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_folder = False
        if is_folder:
            folders.append(entry.name)
            continue
        rel_path = prefix + entry.name
        if wanted is not None and not wanted(rel_path):
            continue
        try:
            info: os.stat_result | None = entry.stat(follow_symlinks=False)
        except OSError:
            info = None
        files.append(FolderEntry(rel_path, info))
    return files, folders


def _unopened(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return (
            "folder became a symlink (or stopped being a folder) while the walk listed it: not followed,"
            " for safety"
        )
    if exc.errno == errno.ENOENT:
        return "folder removed while the walk listed it"
    return f"cannot list folder: {exc.strerror or exc}"


def selected(rel_path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
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
