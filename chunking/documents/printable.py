"""Names and text as they may be printed: nothing in them can drive a terminal or forge a line.

A file name (or a document's text) can hold escape sequences that set a terminal's title, clear its
screen or colour what follows; a newline that forges lines in a list; bytes that are not UTF-8; or
bidirectional overrides that show it reversed. `printable` escapes each such character in the
notation of a Python string literal (`\\x1b`, `\\n`, `\\xff` for an undecodable byte, `\\u202e`),
leaving every other character (accents, CJK, emoji, spaces) as it is. Stored ids keep their exact
names: the escape applies where a name or text is printed (the CLI, logs, the failure table).
"""

from __future__ import annotations

import re

# Unicode's bidirectional formatting characters (UAX #9): they reorder what follows them on screen.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# What `printable` escapes: control characters (C0, DEL, C1: ESC and CSI included), line and
# paragraph separators, lone surrogates (the undecodable bytes of a name read with surrogateescape),
# and the bidirectional controls. The search is a regex so plain text costs one scan.
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{_BIDI}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` with every character that could control a terminal or break a line escaped (see the module)."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"
