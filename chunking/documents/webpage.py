"""An HTML page's main text and title (trafilatura, falling back to every visible text)."""

from __future__ import annotations

from collections.abc import Iterable

from chunkyard.chunking.documents.errors import UnusableFile


def parse_html(html: str) -> tuple[str, str]:
    """The main text of an HTML page and its <title>. trafilatura keeps the page's main content and
    drops navigation, cookie banners, footers and related links (benchmarks/results/html_extraction.md);
    where it finds no main text (a page of bare `<div>`s, a one-line page) every visible text is kept."""
    from bs4 import BeautifulSoup

    try:
        soup = BeautifulSoup(html, "html.parser")
        title = soup.title.get_text(" ", strip=True) if soup.title else ""
        for tag in soup(["script", "style", "noscript", "template", "head"]):
            tag.decompose()
        raw = soup.get_text("\n")
    except RecursionError:
        raise UnusableFile("HTML nested too deeply to parse") from None
    lines = (line.strip() for line in raw.splitlines())
    text = "\n".join(_squeeze_blank_lines(lines)).strip()
    if not text:
        raise UnusableFile("HTML page has no visible text")
    return _main_text(html) or text, title


def _main_text(html: str) -> str:
    """trafilatura's main text of a page, paragraphs separated by blank lines, tables as Markdown tables
    ("" when it finds none)."""
    import trafilatura

    try:
        main = trafilatura.extract(html, favor_recall=True, include_tables=True, include_comments=False)
    except Exception:  # a parser of untrusted input: any failure keeps the visible text instead
        return ""
    blocks: list[str] = []
    for line in (line.strip() for line in (main or "").splitlines()):
        if line.startswith("|") and blocks and blocks[-1].startswith("|"):
            blocks[-1] += "\n" + line  # a table's rows stay one Markdown table
        elif line:
            blocks.append(line)
    return "\n\n".join(blocks)


def _squeeze_blank_lines(lines: Iterable[str]) -> Iterable[str]:
    blank = False
    for line in lines:
        if line:
            blank = False
            yield line
        elif not blank:
            blank = True
            yield ""
