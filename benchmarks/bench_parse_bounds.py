"""What the per-file parse bounds cost: a folder loaded with the untrusted formats parsed in the bounded
worker (chunking.documents.parse_bounds) against the same parsers in-process, side by side.

Corpora: the demo collection (`docs/`, Markdown only: nothing goes to the worker), and real files of
this machine's Debian and Rust documentation (two PDFs, rustdoc's HTML pages). "cold" starts a new worker for
the scan (what each documents step pays once), "warm" reuses it.

    python -m benchmarks.bench_parse_bounds    # prints the table for benchmarks/results/parse_bounds.md
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import chunkyard.chunking.documents.files as document_files
import chunkyard.chunking.documents.folder as document_folder
from chunkyard.chunking.documents import parse_bounds

REPO_ROOT = Path(__file__).resolve().parent.parent
PDFS = [
    "/usr/share/doc/libtasn1-doc/libtasn1.pdf",
    "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
]
HTML_ROOT = Path.home() / ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html/rustdoc"
REPEATS = 7


def _in_process(func: Callable, *args: object, **_: object) -> object:
    return func(*args)


def _time(folder: Path, setup: str) -> float:
    bounded = document_files.run_bounded
    if setup == "in-process":
        document_files.run_bounded = _in_process  # type: ignore[assignment]
    elif setup == "cold":
        parse_bounds._stop_all()
    try:
        started = time.perf_counter()
        documents, failures = document_folder.load_folder(folder)
        elapsed = time.perf_counter() - started
    finally:
        document_files.run_bounded = bounded
    assert documents and not [f for f in failures if "parse" in f.reason], failures
    return elapsed


def _corpus() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="bench-parse-bounds-"))
    for pdf in PDFS:
        if os.path.isfile(pdf):
            shutil.copy(pdf, folder)
    for page in sorted(HTML_ROOT.rglob("*.html"))[:40]:
        shutil.copy(page, folder / f"{len(list(folder.iterdir())):02d}-{page.name}")
    return folder


def main() -> None:
    mixed = _corpus()
    pdfs = sum(1 for p in mixed.iterdir() if p.suffix == ".pdf")
    corpora = {
        "demo (docs/)": REPO_ROOT / "docs",
        f"{pdfs} PDFs + {len(list(mixed.iterdir())) - pdfs} HTML": mixed,
    }
    _time(mixed, "in-process")  # the parsers' first-use costs in this process, once, outside the timing
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average), medians of {REPEATS} runs side by side\n")
    print("| corpus | files | in-process | bounded, warm worker | bounded, cold worker |")
    print("|---|---:|---:|---:|---:|")
    for name, folder in corpora.items():
        files = sum(1 for p in folder.rglob("*") if p.is_file())
        runs: dict[str, list[float]] = {"in-process": [], "warm": [], "cold": []}
        for _ in range(REPEATS):
            for setup in runs:  # interleaved, so load changes hit every setup alike
                runs[setup].append(_time(folder, setup))
        cells = [f"{statistics.median(runs[m]) * 1000:.0f} ms" for m in runs]
        print(f"| {name} | {files} | " + " | ".join(cells) + " |")
    shutil.rmtree(mixed)


if __name__ == "__main__":
    main()
