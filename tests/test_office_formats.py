"""Office folders' formats (issue 38): XLSX and ODS sheets, CSV as a table, EML, EPUB, ODT and RTF.

Every file is written here with a real library (xlsxwriter, odfpy, the standard library's email and
zipfile) and read by `load_file` through the bounded parsing worker; each format has a broken file,
which gives a one-line reason naming the format and never stops the folder.
"""

from __future__ import annotations

import zipfile
from email.message import EmailMessage
from pathlib import Path

import pytest
from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.files import load_file
from chunkyard.chunking.documents.folder import load_folder
from chunkyard.chunking.documents.tables import markdown_table, table_spans


def make_xlsx(path: Path) -> None:
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path))
    prices = book.add_worksheet("Prices")
    for r, row in enumerate([["item", "price", "stock"], ["lantern", 12.5, 3], ["rope | 10 m", 4, 40]]):
        prices.write_row(r, 0, row)
    staff = book.add_worksheet("Staff")
    for r, row in enumerate([["name", "shift"], ["Ana", "night"]]):
        staff.write_row(r, 0, row)
    book.add_worksheet("Empty")
    book.close()


def make_ods(path: Path) -> None:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    document = OpenDocumentSpreadsheet()
    table = Table(name="Tides")
    for row in [["port", "high water"], ["Vigo", "06:40"]]:
        tr = TableRow()
        for value in row:
            cell = TableCell(valuetype="string")
            cell.addElement(P(text=value))
            tr.addElement(cell)
        table.addElement(tr)
    document.spreadsheet.addElement(table)
    document.save(str(path))


def make_odt(path: Path) -> None:
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, P

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text="Ferry timetable"))
    document.text.addElement(P(text="The morning ferry leaves from pier four."))
    table = Table(name="T")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for row in [["day", "departure"], ["Monday", "07:15"]]:
        tr = TableRow()
        for value in row:
            cell = TableCell()
            cell.addElement(P(text=value))
            tr.addElement(cell)
        table.addElement(tr)
    document.text.addElement(table)
    document.save(str(path))


def make_epub(path: Path) -> None:
    chapter = (
        '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><body>'
        "<h1>Chapter one</h1><p>The lighthouse keeper counted {n} gulls.</p></body></html>"
    )
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Keeper log</dc:title></metadata>'
        '<manifest><item id="c1" href="text/c1.xhtml" media-type="application/xhtml+xml"/>'
        '<item id="c2" href="text/c2.xhtml" media-type="application/xhtml+xml"/></manifest>'
        '<spine><itemref idref="c2"/><itemref idref="c1"/></spine></package>'
    )
    container = (
        '<?xml version="1.0"?><container xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        'version="1.0"><rootfiles><rootfile full-path="OEBPS/book.opf" '
        'media-type="application/oebps-package+xml"/></rootfiles></container>'
    )
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("mimetype", "application/epub+zip")
        book.writestr("META-INF/container.xml", container)
        book.writestr("OEBPS/book.opf", opf)
        book.writestr("OEBPS/text/c1.xhtml", chapter.format(n="seven"))
        book.writestr("OEBPS/text/c2.xhtml", chapter.format(n="twelve").replace("one", "zero"))


def make_eml(path: Path) -> None:
    message = EmailMessage()
    message["From"] = "harbour@example.org"
    message["To"] = "crew@example.org"
    message["Subject"] = "Dredging schedule"
    message["Date"] = "Tue, 01 Dec 2026 09:00:00 +0000"
    message.set_content("The dredger works on berth six from Monday.\nKeep the channel clear.")
    message.add_attachment(
        b"depth,metres\nberth six,9\n", maintype="text", subtype="csv", filename="depths.csv"
    )
    path.write_bytes(bytes(message))


RTF = rb"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard The buoy on the east side is green.\par Caf\'e9 opens at six.\par}"


def test_markdown_table_escapes_pipes_and_pads_rows() -> None:
    table = markdown_table([["a", "b"], ["x|y", None], [], ["1.0", 2.0]])
    assert table.splitlines() == ["| a | b |", "| --- | --- |", "| x\\|y |  |", "| 1.0 | 2 |"]
    text = f"intro\n\n{table}\n\nafter"
    ((start, body, end),) = table_spans(text)
    assert text[start:end] == table and text[start:body].count("\n") == 2


def test_xlsx_one_section_per_sheet_with_its_header(tmp_path: Path) -> None:
    make_xlsx(tmp_path / "stock.xlsx")
    doc = load_file(tmp_path / "stock.xlsx")
    assert doc.text.split("\n\n")[0] == "## Sheet: Prices"
    assert "| item | price | stock |\n| --- | --- | --- |\n| lantern | 12.5 | 3 |" in doc.text
    assert "| rope \\| 10 m | 4 | 40 |" in doc.text
    assert "## Sheet: Staff\n\n| name | shift |" in doc.text and "Empty" not in doc.text
    assert doc.metadata["sheets"] == ["Prices", "Staff"]


def test_ods_sheet_as_table(tmp_path: Path) -> None:
    make_ods(tmp_path / "tides.ods")
    doc = load_file(tmp_path / "tides.ods")
    assert doc.text == "## Sheet: Tides\n\n| port | high water |\n| --- | --- |\n| Vigo | 06:40 |"


def test_csv_is_a_table_and_semicolons_are_read(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text('port,note\nVigo,"calm, deep"\n', encoding="utf-8")
    (tmp_path / "b.csv").write_text("port;depth\nCádiz;11\n", encoding="utf-8")
    (tmp_path / "c.tsv").write_text("k\tv\nx\ty\n", encoding="utf-8")
    assert load_file(tmp_path / "a.csv").text == "| port | note |\n| --- | --- |\n| Vigo | calm, deep |"
    assert load_file(tmp_path / "b.csv").text.endswith("| Cádiz | 11 |")
    assert load_file(tmp_path / "c.tsv").text.endswith("| x | y |")


def test_eml_headers_body_and_attachment_names(tmp_path: Path) -> None:
    make_eml(tmp_path / "mail.eml")
    doc = load_file(tmp_path / "mail.eml")
    assert doc.title == "Dredging schedule"
    assert doc.text.startswith("From: harbour@example.org\nTo: crew@example.org\nDate:")
    assert "The dredger works on berth six from Monday." in doc.text
    assert doc.metadata["attachments"] == ["depths.csv"]


def test_epub_chapters_in_spine_order(tmp_path: Path) -> None:
    make_epub(tmp_path / "book.epub")
    doc = load_file(tmp_path / "book.epub")
    assert doc.title == "Keeper log"
    assert doc.text == (
        "Chapter zero\n\nThe lighthouse keeper counted twelve gulls.\n\n"
        "Chapter one\n\nThe lighthouse keeper counted seven gulls."
    )


def test_odt_paragraphs_and_table(tmp_path: Path) -> None:
    make_odt(tmp_path / "ferry.odt")
    doc = load_file(tmp_path / "ferry.odt")
    assert doc.text == (
        "Ferry timetable\n\nThe morning ferry leaves from pier four.\n\n"
        "| day | departure |\n| --- | --- |\n| Monday | 07:15 |"
    )


def test_rtf_text(tmp_path: Path) -> None:
    (tmp_path / "note.rtf").write_bytes(RTF)
    doc = load_file(tmp_path / "note.rtf")
    assert doc.text == "The buoy on the east side is green.\n\nCafé opens at six."


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("bad.xlsx", b"PK\x03\x04 not really a workbook", "broken or unreadable XLSX"),
        ("bad.ods", b"not a zip at all", "broken or unreadable ODS"),
        ("bad.epub", b"PK\x05\x06" + b"\0" * 18, "EPUB"),
        ("bad.odt", b"\x00\x01garbage", "broken or unreadable ODT"),
        ("bad.rtf", b"plain words, no rtf header", "broken RTF"),
        ("bad.eml", b"\x00\x01\x02", "not an e-mail message"),
        ("bad.csv", b'a,b\n"unclosed,1\n', "broken CSV"),
    ],
)
def test_broken_file_gives_one_line_reason(tmp_path: Path, name: str, data: bytes, reason: str) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(UnusableFile) as caught:
        load_file(tmp_path / name)
    message = str(caught.value)
    assert reason in message and "\n" not in message


def test_folder_reads_every_office_format_and_reports_broken_ones(tmp_path: Path) -> None:
    make_xlsx(tmp_path / "stock.xlsx")
    make_eml(tmp_path / "mail.eml")
    make_epub(tmp_path / "book.epub")
    (tmp_path / "note.rtf").write_bytes(RTF)
    (tmp_path / "broken.odt").write_bytes(b"nope")
    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == [
        "book.epub",
        "mail.eml",
        "mail.eml/depths.csv",
        "note.rtf",
        "stock.xlsx",
    ]
    assert [(f.path, f.reason.split(":")[0]) for f in failures] == [
        ("broken.odt", "broken or unreadable ODT")
    ]


def test_html_table_stays_one_markdown_table(tmp_path: Path) -> None:
    (tmp_path / "tides.html").write_text(
        "<html><body><article><h1>Tides</h1><p>The table below lists the tides for the harbour this week.</p>"
        "<table><tr><th>Day</th><th>High water</th></tr><tr><td>Monday</td><td>06:40</td></tr>"
        "<tr><td>Tuesday</td><td>07:25</td></tr></table>"
        "<p>Times are local and may shift with the wind on stormy days.</p></article></body></html>",
        encoding="utf-8",
    )
    doc = load_file(tmp_path / "tides.html")
    assert "| Day | High water |\n|---|---|\n| Monday | 06:40 |\n| Tuesday | 07:25 |" in doc.text
    assert table_spans(doc.text)


def test_mail_attachments_are_documents_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chunkyard.chunking.documents import folder as folder_scan

    monkeypatch.setattr(folder_scan, "RACY_SECONDS", 0.0)  # trust signatures of files written just now
    scan_folder = folder_scan.scan_folder
    make_eml(tmp_path / "mail.eml")
    first = scan_folder(tmp_path)
    assert [d.id for d in first.documents] == ["mail.eml", "mail.eml/depths.csv"]
    attachment = first.documents[1]
    assert attachment.metadata["parent"] == "mail.eml" and attachment.mime_type == "text/csv"
    assert attachment.text == "| depth | metres |\n| --- | --- |\n| berth six | 9 |"
    again = scan_folder(tmp_path, known=first.signatures)  # unchanged: neither is read, both are kept
    assert again.documents == [] and again.unchanged == ["mail.eml", "mail.eml/depths.csv"]
