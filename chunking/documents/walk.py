"""Walking a documents folder: which entries are selected by glob, and which may be read safely.

Nothing outside the folder is ever read: every path is resolved, and a symlink whose target lies
outside the folder (or that dangles, or loops) is refused with its reason. `list_files` (the
sensor's view) applies the same rule (`resolve_entry`) as `chunking.documents.folder.scan_folder`.
A name that is not valid UTF-8 cannot be an id: it is reported under its escaped form (`bad\\xff.txt`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from chunkyard.chunking.documents.errors import UnusableFile


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
    for rel, entry in walk_entries(str(root), "", []):
        if not selected(rel, include, exclude):
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
        raise UnusableFile(f"not a regular file ({file_kind(mode)})")
    return real


def display_path(rel_path: str) -> str:
    """A path that is always valid UTF-8: undecodable bytes of the name escaped as `\\xff`."""
    try:
        rel_path.encode("utf-8")
        return rel_path
    except UnicodeEncodeError:
        return os.fsencode(rel_path).decode("utf-8", "backslashreplace")


def plain_file_stat(rel_path: str, entry: os.DirEntry[str]) -> os.stat_result | None:
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
    """`resolve_entry` for a walked entry, skipping realpath for a plain file (`plain_file_stat`)."""
    if plain_file_stat(rel_path, entry) is not None:
        return real_root / rel_path
    return resolve_entry(real_root, rel_path, Path(entry.path))


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


def walk_entries(folder: str, prefix: str, errors: list[OSError]) -> Iterable[tuple[str, os.DirEntry[str]]]:
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
        yield from walk_entries(entry.path, f"{prefix}{entry.name}/", errors)


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
