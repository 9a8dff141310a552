"""The folder walk's cost: 5 scans of a tree of 200 Markdown pages beside 20,000 files in a hidden folder.

The tree is the shape of a documents folder that is also a git checkout (`.git/objects/xx/...`, never
selected). Run it under two checkouts' Pythons, alternating, each as a whole process timed with
`/usr/bin/time -v`, as benchmarks/results/walk.md does:

    /usr/bin/time -v ../before/.venv/bin/python benchmarks/bench_walk.py --tree /tmp/walk-tree
    /usr/bin/time -v .venv/bin/python benchmarks/bench_walk.py --tree /tmp/walk-tree
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

OBJECT_FOLDERS, OBJECTS, SECTIONS, PAGES = 100, 200, 20, 10


def make_tree(root: Path) -> None:
    """The tree under `root` (made once; an existing one is reused as it is)."""
    if (root / "done").exists():
        return
    for folder in range(OBJECT_FOLDERS):
        objects = root / "docs" / ".git" / "objects" / f"{folder:02x}"
        objects.mkdir(parents=True, exist_ok=True)
        for i in range(OBJECTS):
            (objects / f"obj{i:04d}").write_bytes(b"x")
    for section in range(SECTIONS):
        pages = root / "docs" / f"section{section}"
        pages.mkdir(parents=True, exist_ok=True)
        for i in range(PAGES):
            (pages / f"page{i}.md").write_text(f"# Page {section}.{i}\n\nText of the page.\n")
    (root / "done").write_text("")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="where the tree is made (once) and scanned")
    parser.add_argument("--scans", type=int, default=5)
    args = parser.parse_args(argv)
    from chunkyard.chunking.documents.folder import scan_folder

    make_tree(args.tree)
    for _ in range(args.scans):
        scan = scan_folder(args.tree / "docs", ["**/*.md"])
        if len(scan.documents) != SECTIONS * PAGES:
            print(f"expected {SECTIONS * PAGES} documents, read {len(scan.documents)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
