"""The folder walk against a racing symlink swap (issue 41 #2): what leaks out of the folder, counted.

A process swaps a documents folder's sub-folder with a symlink to a folder outside it, as fast as it
can, while this process scans the folder (`scan_folder`, as the documents step and the sensor do) and
lists it (`list_files`) again and again. Each scan's ids, failure paths and reasons are searched for
anything outside the folder (its file names, its path, its text), and its would-be deletions are
counted (a document under the sub-folder neither read nor covered by a failure of its folder). The
swap is atomic (`renameat2(RENAME_EXCHANGE)`): the sub-folder is never missing, only swapped, so a
deletion is the walk's doing, never a true absence.

It imports whichever chunkyard its Python has, so one script measures two checkouts:

    python benchmarks/bench_symlink_race.py --label after --scans 20000          # this checkout
    ../before/.venv/bin/python benchmarks/bench_symlink_race.py --label before  # main's code

Each run adds its counts under its label to benchmarks/results/symlink_race.json;
`benchmarks/bench_faults.py` renders them into benchmarks/results/faults.md (`race_section`).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SECRET = "SECRET-TEXT-FROM-OUTSIDE"
OUTSIDE_NAMES = [f"outside-name-{i}.md" for i in range(5)]
SUB_IDS = ["sub/b.md", "sub/c.md"]
AT_FDCWD, RENAME_EXCHANGE = -100, 2


def _exchange(libc: ctypes.CDLL, a: bytes, b: bytes) -> None:
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _racer(sub: str, link: str, stop: Any, swaps: Any) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    a, b = os.fsencode(sub), os.fsencode(link)
    done = 0
    while not stop.is_set():
        _exchange(libc, a, b)
        done += 1
    if done % 2:  # leave the sub-folder in place
        _exchange(libc, a, b)
    swaps.value = done


def _layout(base: Path) -> tuple[Path, Path, Path]:
    root, outside = base / "docs", base / "outside-folder"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nA plain document.\n")
    for rel in SUB_IDS:
        (root / rel).write_text(f"# {rel}\n\nA document inside the sub-folder.\n")
    (outside / "deeper").mkdir(parents=True)
    for name in OUTSIDE_NAMES:
        (outside / name).write_text(f"# Outside\n\n{SECRET}\n")
    (outside / "deeper" / OUTSIDE_NAMES[0]).write_text(f"# Deeper\n\n{SECRET}\n")
    (outside / "b.md").write_text(f"# B\n\n{SECRET}\n")  # a name the sub-folder has too
    (outside / "outside-link.md").symlink_to("/etc/hostname")
    link = base / "swap-link"
    link.symlink_to(outside, target_is_directory=True)
    return root, outside, link


def measure(scans: int) -> dict[str, Any]:
    from chunkyard.chunking.documents.folder import scan_folder
    from chunkyard.chunking.documents.walk import list_files

    marks = [*OUTSIDE_NAMES, "outside-folder", "outside-link", "/etc/hostname", SECRET]
    counts = {
        "scans": scans,
        "scans_listing_outside_names": 0,
        "outside_names_listed": 0,
        "reasons_naming_outside": 0,
        "outside_text_read": 0,
        "would_be_deleted": 0,
        "scans_meeting_the_swap": 0,
        "scans_raising": 0,
    }
    with tempfile.TemporaryDirectory() as tmp:
        root, _outside, link = _layout(Path(tmp))
        stop, swaps = multiprocessing.Event(), multiprocessing.Value("q", 0)
        racer = multiprocessing.Process(target=_racer, args=(str(root / "sub"), str(link), stop, swaps))
        racer.start()
        started = time.perf_counter()
        try:
            for _ in range(scans):
                try:
                    scan = scan_folder(root)
                    listing = list_files(root)
                except Exception as exc:  # a walk that raises: counted, and the next scan goes on
                    counts["scans_raising"] += 1
                    counts["outside_names_listed"] += any(m in str(exc) for m in marks)
                    continue
                names = [d.id for d in scan.documents] + list(scan.unchanged)
                names += [f.path for f in scan.failures] + [rel for rel, _ in listing]
                listed = sum(any(m in n for m in marks) for n in names)
                counts["outside_names_listed"] += listed
                counts["scans_listing_outside_names"] += listed > 0
                counts["reasons_naming_outside"] += sum(
                    any(m in f.reason for m in marks) for f in scan.failures
                )
                counts["outside_text_read"] += sum(SECRET in d.text for d in scan.documents)
                given = {d.id for d in scan.documents}
                failed = [f.path for f in scan.failures]
                counts["would_be_deleted"] += sum(
                    i not in given and not any(i == p or i.startswith(p + "/") for p in failed)
                    for i in SUB_IDS
                )
                counts["scans_meeting_the_swap"] += any(
                    p.startswith("sub") or any(m in p for m in marks) for p in failed
                )
        finally:
            stop.set()
            racer.join()
        counts["seconds"] = round(time.perf_counter() - started, 1)
        counts["swaps"] = swaps.value
    return counts


READING = [
    "Before, the walk listed a sub-folder by its path (`os.scandir(path)`), which follows a symlink swapped "
    "in after the parent's listing: the outside folder's names came out as documents' ids and failures, "
    "each skip reason for a link named its resolved target (the outside path), a sub-folder's documents "
    "missing from a scan that listed the outside folder in their place would have been deleted, and "
    "`list_files` raised when a listed link vanished (`os.readlink`). Contents never leaked: every read "
    "opens the resolved path one component at a time with no-follow (`safe_open`).",
    "",
    "After, each sub-folder is opened from its parent's descriptor with `O_NOFOLLOW | O_DIRECTORY` and "
    'listed through that descriptor: a swapped one is skipped under its own name (`sub`: "folder became '
    'a symlink ... not followed"), which keeps its stored documents (`Documents.sync`), and no reason '
    "names a link's target. `os.fwalk` (Python 3.11) opens a sub-folder following links, then drops it "
    "without a word when it is not the folder listed (a stat comparison): its documents would look "
    "deleted, so the walk is `chunking/documents/walk.py`'s own.",
]


def race_section(path: Path = RESULTS / "symlink_race.json") -> str:
    """The Markdown section of benchmarks/results/faults.md for the runs in `path` ("" without any)."""
    if not path.exists():
        return ""
    runs = json.loads(path.read_text(encoding="utf-8"))
    rows = [
        ("scans", "scans"),
        ("swaps by the racing process", "swaps"),
        ("scans that met the swapped folder", "scans_meeting_the_swap"),
        ("scans listing an outside name", "scans_listing_outside_names"),
        ("outside names listed (ids, failure paths, `list_files`)", "outside_names_listed"),
        ("skip reasons naming an outside file or path", "reasons_naming_outside"),
        ("documents holding outside text", "outside_text_read"),
        ("would-be deletions (a document under the swapped folder)", "would_be_deleted"),
        ("scans where the walk raised (an exception out of `scan_folder` or `list_files`)", "scans_raising"),
        ("seconds for the whole run (sequential runs: no timing comparison)", "seconds"),
    ]
    labels = list(runs)
    lines = [
        "",
        "## The symlink race (issue 41 #2)",
        "",
        "`python benchmarks/bench_symlink_race.py --label LABEL --scans N`: a process swaps the "
        "documents folder's sub-folder with a symlink to a folder outside it "
        "(`renameat2(RENAME_EXCHANGE)`, as fast as it can) while the folder is scanned (`scan_folder`) "
        "and listed (`list_files`) N times. "
        + " ".join(f"`{label}`: {runs[label]['code']}, {runs[label]['measured']}." for label in labels),
        "",
        "| | " + " | ".join(f"`{label}`" for label in labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    lines += [f"| {title} | " + " | ".join(str(runs[lb][key]) for lb in labels) + " |" for title, key in rows]
    lines += [
        "",
        "Load (`uptime`) before each run: " + "; ".join(f"`{lb}`: `{runs[lb]['load']}`" for lb in labels),
        "",
        *READING,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the column: before (main's code), after (this)")
    parser.add_argument("--scans", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "symlink_race.json")
    args = parser.parse_args(argv)
    import chunkyard

    code = Path(chunkyard.__file__).resolve().parent.parent
    commit = subprocess.run(
        ["git", "-C", str(code), "log", "-1", "--format=%h"], capture_output=True, text=True
    ).stdout.strip()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    counts = measure(args.scans)
    counts.update(
        {
            "code": f"the code of {code} at {commit or '?'} (Python {platform.python_version()})",
            "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load": load,
        }
    )
    runs = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    runs[args.label] = counts
    args.out.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(counts, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
