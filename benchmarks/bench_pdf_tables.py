"""Unruled PDF tables (issue 38), before and after: the table question set of benchmarks/bench_formats.py
over the same 40-row fleet list drawn as a PDF whose columns are aligned by whitespace alone (no
ruling line, every cell its own text object, a sentence above and below).

Before: the page as read until now (pypdf's text lines, chunked anywhere: unruled-table detection off).
After: the table found by `chunking.documents.pdf_text_tables` and written as a Markdown table, cut
between rows with the header repeated. Recursive chunker at 64 tokens, hybrid, the real model and
Postgres. Row hit@5: a top-5 chunk holds the row; answerable@5: it holds the row with the header (in
its text, or repeated in what was embedded and indexed for it).

    python -m benchmarks.bench_pdf_tables   # one JSON line per reading
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from chunkyard.chunking.documents import pdf_tables
from chunkyard.chunking.documents.files import load_file, parse_bytes
from chunkyard.chunking.types import Document
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url

from benchmarks.bench_formats import FLEET, HEADER, TABLE_QUESTIONS, _index, table_scores

BEFORE = "The harbour office keeps this list of the vessels registered for the season."
AFTER = "Vessels longer than two hundred metres need two tugs when they berth."


def draw_fleet(path: Path) -> None:
    """The fleet list on one A4 page, each cell drawn at its column's position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        figure = plt.figure(figsize=(8.27, 11.69))
        figure.text(0.08, 0.95, BEFORE, fontsize=10)
        for r, row in enumerate([HEADER, *FLEET]):
            for c, cell in enumerate(row):
                figure.text(0.08 + c * 0.21, 0.91 - r * 0.0205, cell, fontsize=9)
        figure.text(0.08, 0.91 - (len(FLEET) + 1) * 0.0205 - 0.02, AFTER, fontsize=10)
        pdf.savefig(figure)
        plt.close(figure)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-pdf-tables-"))
    draw_fleet(work / "fleet.pdf")
    data = (work / "fleet.pdf").read_bytes()
    found = pdf_tables.aligned_pages
    pdf_tables.aligned_pages = lambda data, count: []  # before: no unruled table looked for (in this process)
    text, _, _, extra = parse_bytes(".pdf", data, "fleet.pdf")
    assert "unruled_tables" not in extra and "| crew |" not in text
    before = Document("fleet.pdf", text, "application/pdf", "", extra)
    pdf_tables.aligned_pages = found
    after = load_file(work / "fleet.pdf")
    assert after.metadata.get("unruled_tables") == 1, after.metadata
    store = Store(embedded_database_url(work / "pg"))
    store.migrate()
    embedder = load_embedder("all-MiniLM-L6-v2")
    searcher = Searcher(store, embedder)
    for kind, doc in (("before (pypdf text lines)", before), ("after (Markdown table, rows whole)", after)):
        spec = _index(store, embedder, "before" if kind.startswith("before") else "after", [doc], 64)
        row_hits, answerable = table_scores(searcher, str(spec.name))
        n = len(TABLE_QUESTIONS)
        print(
            json.dumps(
                {
                    "reading": kind,
                    "questions": n,
                    "row_hit_at_5": round(row_hits / n, 3),
                    "answerable_at_5": round(answerable / n, 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
