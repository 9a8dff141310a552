"""Office folders' formats: XLSX/ODS sheets, CSV/TSV, EML mail, EPUB books, ODT and RTF documents.

Each parser takes the file's bytes and returns (text, title, extra metadata) like
`chunking.documents.binary`; every failure becomes an UnusableFile naming the format. Sheets and CSV
become Markdown tables (`chunking.documents.tables`), one `## Sheet: name` section per sheet with its
header row; zip-based formats pass the same archive checks as DOCX (entries, inflated size).
Libraries: python-calamine (XLSX, XLS, ODS; MIT), odfpy (ODT; Apache-2.0), striprtf (RTF; BSD) and the
standard library's `email` and `csv`. EPUB is read with `zipfile` and BeautifulSoup from its package
document: EbookLib is AGPL-licensed.
"""

from __future__ import annotations

import csv
import io
import posixpath
import zipfile
from collections.abc import Callable, Iterator
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

from chunkyard.chunking.documents.binary import Parsed, _check_archive, join_blocks
from chunkyard.chunking.documents.errors import UnusableFile
from chunkyard.chunking.documents.tables import markdown_table
from chunkyard.chunking.documents.webpage import parse_html

MAX_SHEET_CELLS = 2_000_000
ATTACHMENT_FILES = "attachment_files"  # a parser's extra metadata: [(file name, bytes)] to read as documents  # cells of one workbook read at most (the parse bounds cap its time too)


def parse_sheets(data: bytes, kind: str) -> Parsed:
    """Every sheet of a workbook as a `## Sheet: name` section holding its cells as a Markdown table."""
    from python_calamine import CalamineWorkbook

    if kind != "XLS":
        _check_archive(data, kind)
    try:
        book = CalamineWorkbook.from_filelike(io.BytesIO(data))
        blocks, names, cells = [], [], 0
        for name in book.sheet_names:
            sheet = book.get_sheet_by_name(name)
            cells += sheet.height * sheet.width
            if cells > MAX_SHEET_CELLS:
                raise UnusableFile(f"{kind} has more than {MAX_SHEET_CELLS} cells: not indexed")
            table = markdown_table(sheet.to_python(skip_empty_area=True))
            if table:
                blocks.append(f"## Sheet: {name}\n\n{table}")
                names.append(name)
    except UnusableFile:
        raise
    except Exception as exc:  # calamine raises its own types (and zip / XML errors) on broken input
        raise UnusableFile(f"broken or unreadable {kind}: {type(exc).__name__}: {exc}") from None
    if not blocks:
        raise UnusableFile(f"{kind} has no cells with values")
    text, _ = join_blocks(blocks)
    return text, "", {"sheets": names, "tables": len(blocks)}


def parse_xlsx(data: bytes) -> Parsed:
    return parse_sheets(data, "XLSX")


def parse_ods(data: bytes) -> Parsed:
    return parse_sheets(data, "ODS")


def csv_table(text: str, delimiter: str) -> str:
    """A CSV or TSV file's rows as one Markdown table (the first row the header)."""
    if delimiter == ",":  # a European CSV separates with `;`
        first = text.split("\n", 1)[0]
        delimiter = ";" if first.count(";") > first.count(",") else ","
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise UnusableFile(f"broken CSV: {exc}") from None
    table = markdown_table(rows)
    if not table:
        raise UnusableFile("CSV has no cells with values")
    return table


def _mail_body(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    content = part.get_content()
    if part.get_content_subtype() == "html":
        try:
            return parse_html(content)[0]
        except UnusableFile:
            return ""
    return content.strip()


def mail_attachments(message: EmailMessage) -> Iterator[tuple[str, bytes]]:
    """(file name, bytes) of each attachment of a mail, nested mails' attachments not included."""
    for part in message.iter_attachments():
        name = part.get_filename() or ""
        payload = part.get_payload(decode=True)
        if name and isinstance(payload, bytes):
            yield posixpath.basename(name.replace("\\", "/")), payload


def parse_eml(data: bytes) -> Parsed:
    """A mail: its From/To/Cc/Date/Subject lines, then the body (plain text, else the HTML's text);
    attachments' names in `attachments`, their bytes under ATTACHMENT_FILES."""
    try:
        message = BytesParser(policy=policy.default).parsebytes(data)
        if not isinstance(message, EmailMessage) or not (message.keys() or message.get_payload()):
            raise UnusableFile("not an e-mail message (no headers)")
        headers = [
            f"{key}: {message[key]}" for key in ("From", "To", "Cc", "Date", "Subject") if message[key]
        ]
        if not headers:
            raise UnusableFile("not an e-mail message (no From, To, Date or Subject header)")
        body = _mail_body(message)
        attached = list(mail_attachments(message))
    except UnusableFile:
        raise
    except Exception as exc:  # the email package raises many types on broken input
        raise UnusableFile(f"broken or unreadable EML: {type(exc).__name__}: {exc}") from None
    text, _ = join_blocks(["\n".join(headers), body])
    extra: dict[str, Any] = {}
    if attached:
        extra["attachments"] = [name for name, _ in attached]
        extra[ATTACHMENT_FILES] = attached  # read as documents of their own (chunking.documents.files)
    return text, str(message["Subject"] or "").strip(), extra


def _xhtml_blocks(markup: bytes) -> list[str]:
    """A chapter's text, one block per paragraph, heading, list item or table (as Markdown)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(markup, "html.parser")
    blocks: list[str] = []
    for tag in soup.find_all(["h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "pre", "blockquote", "table"]):
        inside = tag.find_parent(["table", "li", "blockquote"]) if tag.name != "table" else None
        if inside is not None or tag.find_parent("table") is not None:
            continue  # read with its table, list item or quote
        if tag.name == "table":
            rows = [
                [cell.get_text(" ", strip=True) for cell in tr.find_all(["th", "td"])] for tr in tag("tr")
            ]
            blocks.append(markdown_table(rows))
        else:
            blocks.append(" ".join(tag.get_text(" ", strip=True).split()))
    return [block for block in blocks if block]


def parse_epub(data: bytes) -> Parsed:
    """An EPUB's chapters in spine order (its package document), and its title."""
    from bs4 import BeautifulSoup

    _check_archive(data, "EPUB")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as book:
            container = BeautifulSoup(book.read("META-INF/container.xml"), "xml")
            rootfile = container.find("rootfile")
            if rootfile is None or not rootfile.get("full-path"):
                raise UnusableFile("broken EPUB: META-INF/container.xml names no package document")
            opf_path = str(rootfile["full-path"])
            package = BeautifulSoup(book.read(opf_path), "xml")
            title_tag = package.find("title")
            title = title_tag.get_text(strip=True) if title_tag else ""
            manifest = {item.get("id"): item.get("href") for item in package.find_all("item")}
            base = posixpath.dirname(opf_path)
            chapters = []
            for ref in package.find_all("itemref"):
                href = manifest.get(ref.get("idref"))
                if href:
                    chapter = book.read(posixpath.normpath(posixpath.join(base, href)))
                    chapters.append("\n\n".join(_xhtml_blocks(chapter)))
    except UnusableFile:
        raise
    except KeyError as exc:
        raise UnusableFile(f"broken EPUB: missing {exc}") from None
    except Exception as exc:
        raise UnusableFile(f"broken or unreadable EPUB: {type(exc).__name__}: {exc}") from None
    text, _ = join_blocks(chapters)
    if not text.strip():
        raise UnusableFile(f"EPUB has no text ({len(chapters)} chapters)")
    return text, title, {"chapters": len(chapters)}


def _odf_blocks(node: Any) -> Iterator[str]:
    """Paragraphs, headings and tables (as Markdown) of an ODF text body, in reading order."""
    from odf import teletype

    for child in node.childNodes:
        name = _odf_name(child)
        if name in ("p", "h"):
            line = " ".join(teletype.extractText(child).split())
            if line:
                yield line
        elif name == "table":
            rows = [
                [
                    " ".join(teletype.extractText(cell).split())
                    for cell in row.childNodes
                    if _odf_name(cell) == "table-cell"
                ]
                for row in child.getElementsByType(_odf_row())
            ]
            yield markdown_table(rows)
        elif name in ("list", "list-item", "section", "list-header"):
            yield from _odf_blocks(child)


def _odf_name(node: Any) -> str | None:
    return getattr(node, "qname", (None, None))[1]


def _odf_row() -> Any:
    from odf.table import TableRow

    return TableRow


def parse_odt(data: bytes) -> Parsed:
    """An OpenDocument text's paragraphs, headings and tables in reading order, and its title."""
    _check_archive(data, "ODT")
    try:
        from odf import opendocument

        document = opendocument.load(io.BytesIO(data))
        blocks = list(_odf_blocks(document.text))
        title = ""
        for meta in document.meta.childNodes:
            if _odf_name(meta) == "title":
                title = str(meta).strip()
    except Exception as exc:  # odfpy / the XML parser raise many types on broken input
        raise UnusableFile(f"broken or unreadable ODT: {type(exc).__name__}: {exc}") from None
    text, _ = join_blocks(blocks)
    if not text.strip():
        raise UnusableFile("ODT has no text")
    return text, title, {}


def parse_rtf(data: bytes) -> Parsed:
    """An RTF document's text (striprtf), paragraphs kept."""
    from striprtf.striprtf import rtf_to_text

    head = data.lstrip()[:5]
    if head != b"{\\rtf":
        raise UnusableFile("broken RTF: the file does not start with {\\rtf")
    try:
        raw = rtf_to_text(data.decode("latin-1"), errors="replace")
    except Exception as exc:
        raise UnusableFile(f"broken or unreadable RTF: {type(exc).__name__}: {exc}") from None
    lines = [" ".join(line.split()) for line in raw.splitlines()]
    text, _ = join_blocks(lines)
    if not text.strip():
        raise UnusableFile("RTF has no text")
    return text, "", {}


# extension -> (MIME type, parser); chunking.documents.files reads these beside binary.BINARY_FORMATS.
OFFICE_FORMATS: dict[str, tuple[str, Callable[[bytes], Parsed]]] = {
    ".xlsx": ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", parse_xlsx),
    ".ods": ("application/vnd.oasis.opendocument.spreadsheet", parse_ods),
    ".eml": ("message/rfc822", parse_eml),
    ".epub": ("application/epub+zip", parse_epub),
    ".odt": ("application/vnd.oasis.opendocument.text", parse_odt),
    ".rtf": ("application/rtf", parse_rtf),
}
# CSV and TSV are text (read as UTF-8), written as one Markdown table: extension -> (MIME, delimiter).
TABLE_TYPES: dict[str, tuple[str, str]] = {
    ".csv": ("text/csv", ","),
    ".tsv": ("text/tab-separated-values", "\t"),
}
