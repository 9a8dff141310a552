"""One section of a results markdown file, replaced in place: the benchmarks that share a file each own a section."""

from __future__ import annotations

from pathlib import Path


def write_section(markdown: Path, heading: str, lines: list[str]) -> None:
    """Replace the section that starts with `heading` (up to the next `## `) by `lines`, or append it."""
    text = markdown.read_text(encoding="utf-8")
    before, _, after = text.partition(heading)
    rest = after.split("\n## ", 1)[1] if "\n## " in after else ""
    text = before.rstrip() + "\n\n" + "\n".join(lines) + "\n" + (f"\n## {rest}" if rest else "")
    markdown.write_text(text, encoding="utf-8")
