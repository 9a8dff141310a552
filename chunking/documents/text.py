"""Text files' bytes as text: strict UTF-8, binary files refused, files caught mid-write read again."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

from chunkyard.chunking.documents.errors import UnusableFile

# Characters that never appear in text: C0/C1 controls except tab, newlines, form feed and ESC.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")


MAX_CONTROL_FRACTION = 0.1


MID_WRITE_RETRIES = 4
MID_WRITE_WAIT_S = 0.25


def settled_text(data: bytes, reread: Callable[[], bytes], size: Callable[[], int]) -> bytes:
    """`data`, or the file read again (`reread`) while it changes: a text file caught mid-write (its
    last character cut, or its `size` now other than what was read) is not reported as bad UTF-8.

    Still changing and undecodable after MID_WRITE_RETRIES reads: UnusableFile saying so (the stored
    version is kept and the file is read again on the next scan). A file that stays the same is
    returned as it is, for `decode_text` to say where it is broken.
    """
    changed = False
    for _ in range(MID_WRITE_RETRIES):
        try:
            data.decode("utf-8-sig")
            return data
        except UnicodeDecodeError as exc:
            cut = exc.reason == "unexpected end of data"  # a multi-byte character cut at the end
        try:
            now = size()
        except OSError:
            return data  # gone: decode_text reports the bytes read
        if not cut and now == len(data):
            return data
        time.sleep(MID_WRITE_WAIT_S)
        again = reread()
        changed = changed or again != data
        data = again
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError:
        if not changed:
            return data  # the same bytes all along: broken as it is, not being written
        raise UnusableFile(
            "the file changed while it was read (still being written?); it is read again on the next scan"
        ) from None
    return data


def decode_text(data: bytes) -> str:
    """Strict UTF-8 (a BOM is dropped); refuses binary files: NUL bytes or many control characters."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnusableFile(
            f"not valid UTF-8: byte 0x{bad} at offset {exc.start} (line {line}); re-save the file as UTF-8"
        ) from None
    if "\x00" in text:
        raise UnusableFile("contains NUL bytes: looks like a binary file, not text")
    controls = len(text) - len(_CONTROL.sub("", text))
    if controls > MAX_CONTROL_FRACTION * len(text):
        raise UnusableFile(
            f"not text: {controls} of {len(text)} characters are control characters (a binary file?)"
        )
    return text


def has_visible_text(text: str) -> bool:
    """True when some character is neither whitespace (NBSP included) nor invisible (zero-width, BOM)."""
    return any(ch.isprintable() and not ch.isspace() for ch in text)


def validate_json(text: str, *, jsonl: bool) -> None:
    """Raise UnusableFile unless `text` is JSON (or JSON Lines); nesting too deep to parse is refused."""
    try:
        if not jsonl:
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
                raise UnusableFile(
                    f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
                ) from None
            return
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UnusableFile(f"invalid JSON Lines: line {number}: {exc.msg}") from None
    except RecursionError:
        raise UnusableFile("JSON nested too deeply to parse") from None
