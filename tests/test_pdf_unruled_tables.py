"""Unruled PDF tables (issue 38): columns aligned by whitespace alone become Markdown tables in place, the
prose around them kept as prose; a two-column page of prose and a key/value list of sentences stay text.

The PDFs are drawn here with matplotlib's PDF backend (every cell its own text object, no ruling line).
"""

from __future__ import annotations

from pathlib import Path

from chunkyard.chunking import build_chunker
from chunkyard.chunking.documents.files import load_file

from tests.test_pdf_furniture import make_manual

HEADER = ("Vessel", "Home port", "Length (m)", "Crew")
FLEET = [
    ("Aurora", "Vigo", "24", "5"),
    ("Boreas", "Cadiz", "31", "9"),
    ("Calypso", "Bilbao", "18", "4"),
    ("Dorado", "Gijon", "42", "11"),
    ("Estrella", "Malaga", "27", "6"),
    ("Falcon", "Huelva", "35", "8"),
]
BEFORE = "The harbour keeps a list of the vessels that call here every season."
AFTER = "Vessels longer than forty metres need a pilot when they enter the harbour."


def draw_unruled(path: Path, rows: list[tuple[str, ...]], before: str = BEFORE, after: str = AFTER) -> None:
    """One A4 page: a sentence, `rows` drawn cell by cell at fixed column positions, a sentence."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        figure = plt.figure(figsize=(8.27, 11.69))
        figure.text(0.08, 0.92, before, fontsize=11)
        for r, row in enumerate(rows):
            for c, cell in enumerate(row):
                figure.text(0.08 + c * 0.2, 0.86 - r * 0.025, cell, fontsize=10)
        figure.text(0.08, 0.86 - len(rows) * 0.025 - 0.04, after, fontsize=11)
        pdf.savefig(figure)
        plt.close(figure)


def test_an_unruled_table_becomes_a_markdown_table_between_its_sentences(tmp_path: Path) -> None:
    draw_unruled(tmp_path / "fleet.pdf", [HEADER, *FLEET])
    doc = load_file(tmp_path / "fleet.pdf")
    table = "\n".join(
        ["| Vessel | Home port | Length (m) | Crew |", "| --- | --- | --- | --- |"]
        + [f"| {' | '.join(row)} |" for row in FLEET]
    )
    assert doc.text == f"{BEFORE}\n\n{table}\n\n{AFTER}"
    assert doc.metadata["table_pages"] == [1] and doc.metadata["unruled_tables"] == 1
    assert "columns_pages" not in doc.metadata  # the gap between two columns is no gutter
    # chunked between rows, the header repeated in each part's embedded text
    chunks = build_chunker({"strategy": "recursive", "size": 48, "tokenizer": "model"}).chunk(doc)
    parts = [chunk for chunk in chunks if chunk.metadata.get("table")]
    assert len(parts) >= 2
    for chunk in parts:
        assert chunk.text == doc.text[chunk.start : chunk.end]
        assert "| Vessel | Home port | Length (m) | Crew |" in (chunk.embed_text or chunk.text)
        rows = [line for line in chunk.text.splitlines() if line.startswith("|")]
        assert rows and all(line.endswith(" |") for line in rows)  # no row cut


def test_a_key_value_table_is_kept_and_two_columns_of_prose_are_not_a_table(tmp_path: Path) -> None:
    pairs = [("Berth", "Length"), ("North quay", "300 m"), ("East quay", "180 m"), ("Fuel pier", "90 m")]
    draw_unruled(tmp_path / "berths.pdf", pairs)
    assert "| North quay | 300 m |" in load_file(tmp_path / "berths.pdf").text
    # sentences in two aligned columns: many words a cell, so not a key/value table
    prose = [
        ("Pilots board at the outer buoy", "and stay until the ship is moored"),
        ("Tugs wait at the north quay", "when the wind is from the west"),
        ("The harbour master signs off", "every departure after the checks"),
    ]
    draw_unruled(tmp_path / "notes.pdf", prose)
    doc = load_file(tmp_path / "notes.pdf")
    assert "|" not in doc.text and "unruled_tables" not in doc.metadata
    make_manual(tmp_path / "manual.pdf")  # a two-column page: read by column, no table
    manual = load_file(tmp_path / "manual.pdf")
    assert manual.metadata["columns_pages"] == [2] and "tables" not in manual.metadata
