"""PDF page furniture (issue 38): running headers, footers and page numbers dropped, hyphenated words
joined, a two-column page read column by column; chunk spans still exact against the stored text.

The PDF is written here with matplotlib's PDF backend: a header and a `Page N of M` footer on every
page, one page in two columns whose lines are drawn row by row (so the text layer interleaves them).
"""

from __future__ import annotations

from pathlib import Path

from chunkyard.chunking import build_chunker
from chunkyard.chunking.documents.files import load_file
from chunkyard.chunking.documents.furniture import drop_furniture, join_hyphenated

HEADER = "ACME Harbour Authority - Operations Manual"
LEFT = [
    "The harbour master opens the",
    "east gate at dawn and closes",
    "it after the last ferry has",
    "docked for the night. Pilots",
    "must report their position",
    "every hour while in the chan-",
    "nel and keep radio silence.",
]
RIGHT = [
    "Cargo ships wait at the outer",
    "anchorage until a berth is",
    "free. Tugs assist every ship",
    "longer than ninety metres.",
    "Fuel is delivered by barge",
    "on Tuesdays and Fridays only,",
    "weather permitting.",
]
BODIES = [
    "Ships moor bow first and keep\nfenders out at all times.",
    "",  # the two-column page
    "Anchors are checked each spring\nby the Port-Ops team.",
    "Visitors sign in at the gate.",
]


def make_manual(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        for number, body in enumerate(BODIES, start=1):
            figure = plt.figure(figsize=(8.27, 11.69))
            figure.text(0.5, 0.96, HEADER, ha="center", fontsize=10)
            if body:
                figure.text(0.08, 0.8, body, fontsize=11)
            else:
                for row, (left, right) in enumerate(zip(LEFT, RIGHT, strict=True)):
                    figure.text(0.08, 0.85 - row * 0.03, left, fontsize=11)
                    figure.text(0.55, 0.85 - row * 0.03, right, fontsize=11)
            figure.text(0.5, 0.03, f"Page {number} of {len(BODIES)}", ha="center", fontsize=9)
            pdf.savefig(figure)
            plt.close(figure)


def test_headers_footers_dropped_columns_read_in_order(tmp_path: Path) -> None:
    make_manual(tmp_path / "manual.pdf")
    doc = load_file(tmp_path / "manual.pdf")
    assert HEADER not in doc.text and "Page " not in doc.text
    assert doc.metadata["furniture_lines_dropped"] == 8 and doc.metadata["columns_pages"] == [2]
    left = doc.text.index("The harbour master opens the")
    assert (
        left
        < doc.text.index("docked for the night. Pilots")
        < doc.text.index("Cargo ships wait at the outer")
    )
    assert "in the channel and keep radio silence." in doc.text  # "chan-" + "nel" joined
    assert "by the Port-Ops team." in doc.text  # a hyphen inside a word stays
    starts = doc.metadata["page_starts"]
    assert starts[1] <= left < starts[2] <= doc.text.index("Anchors are checked")
    for chunk in build_chunker({"strategy": "recursive", "size": 32, "tokenizer": "model"}).chunk(doc):
        assert doc.text[chunk.start : chunk.end] == chunk.text


def test_furniture_rules() -> None:
    words = ["harbour", "ferry", "tug", "buoy"]
    pages = [
        f"Annual report 2026\nThe {w} opens.\nIt closes.\n{w} notes\nQ{n} / 2026\n{n}"
        for n, w in enumerate(words, 1)
    ]
    cleaned, dropped = drop_furniture(pages)
    assert cleaned == [f"The {w} opens.\nIt closes.\n{w} notes" for w in words] and dropped == 12
    # two pages: too few to call a line repeated, but a bare page number still goes
    assert drop_furniture(["Title\nA\n1", "Title\nB\n2"])[0] == ["Title\nA", "Title\nB"]
    assert join_hyphenated("exam-\nple and X-\nRay, 10-\n12") == "example and X-\nRay, 10-\n12"


def test_a_ruled_pdf_table_becomes_a_markdown_table_in_place(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(tmp_path / "fleet.pdf") as pdf:
        figure = plt.figure(figsize=(8.27, 11.69))
        figure.text(0.08, 0.9, "Fleet list for the summer season.", fontsize=11)
        axes = figure.add_axes((0.1, 0.5, 0.8, 0.3))
        axes.axis("off")
        rows = [["Aurora", "Vigo", "14"], ["Boreas", "Cadiz", "9"], ["Calypso", "Bilbao", "21"]]
        axes.table(cellText=rows, colLabels=["vessel", "home port", "crew"], loc="center")
        figure.text(0.08, 0.3, "Crews change every second Monday.", fontsize=11)
        pdf.savefig(figure)
        plt.close(figure)
    doc = load_file(tmp_path / "fleet.pdf")
    assert doc.text == (
        "Fleet list for the summer season.\n\n| vessel | home port | crew |\n| --- | --- | --- |\n"
        "| Aurora | Vigo | 14 |\n| Boreas | Cadiz | 9 |\n| Calypso | Bilbao | 21 |\n\n"
        "Crews change every second Monday."
    )
    assert doc.metadata["table_pages"] == [1] and doc.metadata["tables"] == 1
