"""Issue 38's acceptance numbers besides OCR's error rate (benchmarks/bench_ocr.py):

1. hit@5 of questions over scanned pages against the same documents with a text layer: eight one-page
   notices of our own, as text PDFs (matplotlib) and as image-only PDFs drawn as scans (200 dpi, tilted,
   noised), each loaded by `load_file` (the scans through OCR) and indexed in the real Postgres with the
   real model (recursive 128, hybrid); a hit is the question's document in the top 5.
2. A table question set (each answer needs the header and a row: "how many crew does the Boreas
   carry?"), before and after: the same 40-row fleet list as the old CSV reading gave it (plain
   comma-separated lines, chunked anywhere) and as now (a Markdown table, cut between rows with the
   header repeated). Row hit@5: a top-5 chunk holds the row; answerable@5: it holds the row together
   with the header (in its text, or repeated in what was embedded and indexed for it).
3. Furniture: a multi-page PDF of our own with a running header and `Page N of M` on every page.

    python -m benchmarks.bench_formats   # prints the Markdown for benchmarks/results/formats.md
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from chunkyard.chunking.documents.files import load_file
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url

from benchmarks.scanned_pages import page_pdf, render_page

RESULTS = Path(__file__).resolve().parent / "results" / "formats.json"
NOTICES: dict[str, tuple[str, ...]] = {
    "lease": (
        "The warehouse lease starts on the first of March.",
        "Rent is paid monthly and late payment adds a fee.",
        "Either party may end the lease with ninety days notice.",
    ),
    "boiler": (
        "The boiler is serviced every October by a licensed engineer.",
        "If the pressure gauge shows red, shut the main valve.",
        "Spare fuses are kept in the grey cabinet by the stairs.",
    ),
    "parking": (
        "Staff park in the north lot; visitors use the south lot.",
        "Parking permits are renewed each January at reception.",
        "Cars left overnight without a permit are towed.",
    ),
    "library": (
        "Books may be borrowed for three weeks and renewed twice.",
        "Overdue books cost ten cents a day.",
        "The reading room is silent after six in the evening.",
    ),
    "kitchen": (
        "The shared fridge is emptied every Friday afternoon.",
        "Label your food with your name and the date.",
        "The dishwasher runs at noon and at four.",
    ),
    "security": (
        "Badges must be worn visibly at all times in the building.",
        "Lost badges are reported to security within one day.",
        "Tailgating through the turnstiles is not allowed.",
    ),
    "travel": (
        "Train tickets are booked through the travel desk.",
        "Hotel costs are refunded up to one hundred euros a night.",
        "Receipts are submitted within thirty days of the trip.",
    ),
    "garden": (
        "The roof garden opens in April and closes in October.",
        "Watering is done by volunteers on Mondays.",
        "Barbecues on the roof need written approval.",
    ),
}
QUESTIONS: list[tuple[str, str]] = [
    ("when does the warehouse rental begin", "lease"),
    ("how much notice to terminate the lease", "lease"),
    ("what to do when the pressure gauge is red", "boiler"),
    ("where are the spare fuses", "boiler"),
    ("where do visitors park", "parking"),
    ("what happens to cars without a permit overnight", "parking"),
    ("how long can I borrow a book", "library"),
    ("fine for late books", "library"),
    ("when is the fridge cleared out", "kitchen"),
    ("what time does the dishwasher run", "kitchen"),
    ("what if I lose my badge", "security"),
    ("may I follow someone through the turnstile", "security"),
    ("how do I book a train", "travel"),
    ("hotel refund limit per night", "travel"),
    ("when is the roof garden open", "garden"),
    ("can we have a barbecue on the roof", "garden"),
]
PORTS = ["Vigo", "Cadiz", "Bilbao", "Porto", "Brest", "Genoa", "Split", "Malmo"]
NAMES = [
    "Aurora", "Boreas", "Calypso", "Dorado", "Egret", "Falcon", "Gannet", "Halcyon", "Ibis", "Jupiter",
    "Kestrel", "Lyra", "Marlin", "Nereid", "Osprey", "Petrel", "Quill", "Raven", "Sirius", "Tern",
    "Umbra", "Vesta", "Wren", "Xebec", "Yarrow", "Zephyr", "Albatross", "Bittern", "Cormorant", "Dunlin",
    "Eider", "Fulmar", "Grebe", "Heron", "Jacana", "Kittiwake", "Loon", "Merlin", "Nightjar", "Oriole",
]  # fmt: skip
FLEET = [
    [name, PORTS[i % len(PORTS)], str(60 + 7 * i), str(8 + (i * 5) % 23)] for i, name in enumerate(NAMES)
]
HEADER = ["vessel", "home port", "length in metres", "crew"]
TABLE_QUESTIONS = [
    *((f"how many crew does the {row[0]} carry", row) for row in FLEET[::5]),
    *((f"what is the length in metres of the {row[0]}", row) for row in FLEET[2::5]),
    *((f"which home port is the {row[0]} registered in", row) for row in FLEET[4::5]),
]


def _text_pdf(lines: tuple[str, ...]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(6, 3))
    figure.text(0.05, 0.5, "\n".join(lines))
    out = io.BytesIO()
    figure.savefig(out, format="pdf")
    plt.close(figure)
    return out.getvalue()


def _config(name: str, size: int) -> IndexConfig:
    return IndexConfig(
        name=name,
        chunker={"strategy": "recursive", "size": size, "tokenizer": "model"},
        bm25={"analyzer": "english"},
        hybrid={"fusion": "rrf", "rrf_k": 60, "candidates": 50},
    )


def _index(store: Store, embedder, collection: str, docs: list[Document], size: int) -> IndexSpec:
    spec = IndexSpec(collection, _config("bench", size))
    store.documents.sync(collection, docs, [])
    build_index(store, spec, embedder)
    return spec


def scanned_vs_text(store: Store, embedder, folder: Path) -> dict:
    loaded: dict[str, list[Document]] = {"text layer": [], "scanned (OCR)": []}
    seconds = 0.0
    for name, lines in NOTICES.items():
        (folder / f"{name}.pdf").write_bytes(_text_pdf(lines))
        loaded["text layer"].append(load_file(folder / f"{name}.pdf", f"{name}.pdf"))
        scan = folder / "scans" / f"{name}.pdf"
        scan.parent.mkdir(exist_ok=True)
        scan.write_bytes(page_pdf([render_page(lines, "Latin", 200)], 200))
        started = time.perf_counter()
        loaded["scanned (OCR)"].append(load_file(scan, f"{name}.pdf"))
        seconds += time.perf_counter() - started
    searcher = Searcher(store, embedder)
    out = {"ocr_seconds_per_page": round(seconds / len(NOTICES), 2)}
    for kind, docs in loaded.items():
        spec = _index(store, embedder, "scan" if "OCR" in kind else "text", docs, 128)
        hits = 0
        for question, expected in QUESTIONS:
            results = searcher.search(question, str(spec.name), k=5)
            hits += any(r.doc_id == f"{expected}.pdf" for r in results)
        out[kind] = hits / len(QUESTIONS)
    return out


def tables_before_after(store: Store, embedder) -> dict:
    from chunkyard.chunking.documents.files import parse_bytes

    csv_text = "\n".join(",".join(row) for row in [HEADER, *FLEET]) + "\n"
    before = Document("fleet.csv", csv_text)  # how CSV was read before: its text as it is
    text, *_ = parse_bytes(".csv", csv_text.encode(), "fleet.csv")
    after = Document("fleet.csv", text)
    searcher = Searcher(store, embedder)
    out = {}
    for kind, doc in (("before (CSV as plain text)", before), ("after (Markdown table, rows whole)", after)):
        spec = _index(store, embedder, "before" if kind.startswith("before") else "after", [doc], 64)
        row_hits, answerable = table_scores(searcher, str(spec.name))
        out[kind] = {
            "row_hit_at_5": row_hits / len(TABLE_QUESTIONS),
            "answerable_at_5": answerable / len(TABLE_QUESTIONS),
        }
    return out


def table_scores(searcher: Any, index: str) -> tuple[int, int]:
    """Of TABLE_QUESTIONS on `index`: how many have the answer's row whole in the top 5, and how many of
    those can be read (the header is in the hit, or it is a later table piece that repeats it)."""
    row_hits = answerable = 0
    for question, row in TABLE_QUESTIONS:
        results = searcher.search(question, index, k=5)
        with_row = [r for r in results if row[0] in r.text and all(v in r.text for v in row[1:])]
        row_hits += bool(with_row)
        answerable += any(
            "crew" in r.text or (r.metadata.get("table") and r.metadata.get("table_part", 1) > 1)
            for r in with_row
        )
    return row_hits, answerable


def furniture(folder: Path) -> dict:
    from pypdf import PdfReader

    from tests.test_pdf_furniture import BODIES, make_manual
    from tests.test_pdf_furniture import HEADER as RUNNING_HEADER

    path = folder / "manual.pdf"
    make_manual(path)
    raw = "\n".join(page.extract_text() for page in PdfReader(path).pages)
    doc = load_file(path)
    return {
        "pages": len(BODIES),
        "header lines before": raw.count(RUNNING_HEADER),
        "header lines after": doc.text.count(RUNNING_HEADER),
        "page-number lines before": raw.count("Page "),
        "page-number lines after": doc.text.count("Page "),
        "lines dropped": doc.metadata.get("furniture_lines_dropped", 0),
        "two-column pages read by column": doc.metadata.get("columns_pages", []),
    }


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-formats-"))
    store = Store(embedded_database_url(folder / "pg"))
    store.migrate()
    embedder = load_embedder("all-MiniLM-L6-v2")
    results = {
        "scanned_vs_text": scanned_vs_text(store, embedder, folder),
        "tables": tables_before_after(store, embedder),
        "furniture": furniture(folder),
    }
    RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
