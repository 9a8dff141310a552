"""File names reach the terminal escaped (issue 41 #4): an escape sequence in a name (or in a document's
text) cannot set the terminal's title, clear it or colour what follows; a newline in a name cannot forge
a line of the skip list; a name that is not UTF-8 keeps its whole skip line, reason included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from chunkyard.chunking.documents.folder import DocumentFailure
from chunkyard.chunking.documents.printable import printable
from chunkyard.orchestration.cli_errors import UsageError, report
from chunkyard.orchestration.cli_index import _failure_rows
from chunkyard.orchestration.stack_local import log_tail

from tests.conftest import REPO_ROOT

# Raw names as bytes (os.fsdecode gives the str a walk sees: surrogateescape for bytes not UTF-8).
TITLE = b"title\x1b]0;PWNED\x07\x1b[2J\x1b[31mred.txt"
FORGED = b"forged\n  - fake.md: a forged line.txt"
NOT_UTF8 = b"bad\xff\xfename.md"
C1_AND_BIDI = "c1\x9b31m \u202egnp.txt".encode()
PIPES = b"a` | b|c.txt"
TERMINAL_CONTROL = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def test_printable_escapes_what_drives_a_terminal_and_keeps_the_rest() -> None:
    assert printable(os.fsdecode(TITLE)) == "title\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mred.txt"
    assert printable(os.fsdecode(FORGED)) == "forged\\n  - fake.md: a forged line.txt"
    assert printable(os.fsdecode(NOT_UTF8)) == "bad\\xff\\xfename.md"
    assert printable(os.fsdecode(C1_AND_BIDI)) == "c1\\x9b31m \\u202egnp.txt"
    assert printable("a\r\tb\x7f\u2028") == "a\\r\\tb\\x7f\\u2028"
    plain = "Café 東京 😀 a\u00a0b — résumé.md"  # accents, CJK, emoji, no-break space: as they are
    assert printable(plain) == plain
    assert printable(printable(os.fsdecode(TITLE))) == printable(os.fsdecode(TITLE))  # idempotent


def test_every_failure_is_one_row_of_the_skip_table_and_reads_back_whole() -> None:
    """The documents asset's failures are typed rows: a name with a pipe, a newline or an escape reads
    back exactly as it was (the CLI escapes it where it prints it)."""
    from chunkyard.assets.results import FAILURE_SCHEMA
    from dagster import MetadataValue, TableRecord

    failures = [
        DocumentFailure(os.fsdecode(name), f"reason {i}: {os.fsdecode(name)} | ends with a pipe |")
        for i, name in enumerate((TITLE, FORGED, NOT_UTF8, C1_AND_BIDI, PIPES))
    ]
    rows = [TableRecord({"file": f.path, "reason": f.reason}) for f in failures]
    table = MetadataValue.table(rows, schema=FAILURE_SCHEMA)
    assert _failure_rows(table) == [(f.path, f.reason) for f in failures]
    assert not any(c in printable(f.path) + printable(f.reason) for f in failures for c in TERMINAL_CONTROL)


def test_an_error_naming_a_hostile_file_is_one_escaped_line(capsys: pytest.CaptureFixture[str]) -> None:
    name = os.fsdecode(TITLE + b"\n" + NOT_UTF8)
    assert report("index", UsageError(f"{name}: no such collection")) == 2
    err = capsys.readouterr().err
    assert err == f"chunkyard index: {printable(name.replace(chr(10), ' '))}: no such collection\n"
    assert not any(c in err for c in TERMINAL_CONTROL)


def test_a_service_log_tail_is_printed_escaped(tmp_path: Path) -> None:
    """`stack up` prints a dying service's log tail: a file name quoted in it is escaped too."""
    log = tmp_path / "query.log"
    name = os.fsdecode(TITLE)
    log.write_text(f"old run\n==== chunkyard stack up 2026-12-04 ====\nskipped {name}: empty file\nready\n")
    assert log_tail(log).splitlines()[1:] == [f"skipped {printable(name)}: empty file", "ready"]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    keep = {"CHUNKYARD_PROJECT", "CHUNKYARD_HOME", "CHUNKYARD_CONFIGS", "DATABASE_URL", "DAGSTER_HOME"}
    env = {k: v for k, v in os.environ.items() if k not in keep}
    env["PYTHONPATH"] = str(REPO_ROOT)
    command = [sys.executable, "-m", "chunkyard.orchestration.cli", *argv]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=900)


@pytest.mark.slow
def test_index_and_search_print_hostile_names_escaped(tmp_path: Path) -> None:
    """A real `chunkyard index` and `chunkyard search` over a folder of hostile names: no control byte
    reaches stdout, and the skip list has exactly one whole line per skipped file."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nThe harbour pilot reads tide tables.\n")
    root = os.fsencode(docs) + b"/"
    with open(root + TITLE, "w") as handle:  # a document: its name is printed by `search`
        handle.write("The harbour title file \x1b[32mcoloured\x1b[0m text.\n")
    skipped = {FORGED: b"\xff\xfe not UTF-8", NOT_UTF8: b"harbour", C1_AND_BIDI: b"\xff", PIPES: b"\xff"}
    for name, data in skipped.items():
        with open(root + name, "wb") as handle:
            handle.write(data)
    for i in range(200):  # past the documents step's table of 200: the count says how many more
        (docs / f"zz-bulk-{i:03d}.txt").write_bytes(b"\xff")
    project = tmp_path / "work"
    project.mkdir()
    for argv in (["init"], ["add", "hostile", str(docs)]):
        assert _run(argv, project).returncode == 0
    index = _run(["index"], project)
    out = index.stdout.decode("utf-8")
    assert index.returncode == 0, out + index.stderr.decode("utf-8", "replace")
    assert not any(c in out for c in TERMINAL_CONTROL), out
    lines = out.splitlines()
    start = lines.index(f"Files skipped ({len(skipped) + 200}):")
    listed = lines[start + 1 : start + 1 + len(skipped)]
    assert lines[start + 201] == f"  ... and {len(skipped)} more, not listed"
    assert lines[start + 202] == ""  # nothing forged after the list
    for name in skipped:
        shown = printable(os.fsdecode(name))
        (line,) = [line for line in listed if line.startswith(f"  - {shown}: ")]
        reason = line.removeprefix(f"  - {shown}: ")
        assert reason.startswith(("not valid UTF-8", "file name is not valid UTF-8")), line

    search = _run(["search", "harbour title file", "--index", "hostile/recursive-256"], project)
    out = search.stdout.decode("utf-8")
    assert search.returncode == 0, out + search.stderr.decode("utf-8", "replace")
    assert not any(c in out for c in TERMINAL_CONTROL), out
    assert printable(os.fsdecode(TITLE)) in out
    assert "\\x1b[32mcoloured\\x1b[0m" in out
