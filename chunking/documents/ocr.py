"""OCR of page images with Tesseract, its languages chosen by the page's script, each page cached by content hash.

The engine was chosen by measurement (benchmarks/results/formats.md): Tesseract (Debian's
`tesseract-ocr` and its language packs) reads Latin, Cyrillic, Arabic and Chinese pages; the OCR
models inside the rapidocr wheel read only Chinese and Latin. A page's script comes from
Tesseract's orientation and script detection (OSD); the page is then read with the installed
language packs of that script (`SCRIPT_LANGUAGES`). A read page is kept in a cache folder
(`CHUNKYARD_OCR_CACHE`, else the user cache's `chunkyard/ocr`) under the hash of its source bytes and
the engine's settings, so an unchanged file is never read twice.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PIL import Image

from chunkyard.chunking.documents.errors import UnusableFile

log = logging.getLogger("chunkyard.ocr")

CACHE_ENV = "CHUNKYARD_OCR_CACHE"
# Render resolution of a PDF page for OCR (benchmarks/results/formats.md: 300 dpi reads small print
# that 150 dpi loses, at about twice the time).
PDF_DPI = 300
# Tesseract's OSD script name -> language packs to read it with (those installed are used).
SCRIPT_LANGUAGES: dict[str, tuple[str, ...]] = {
    "Latin": ("eng", "spa", "fra", "deu", "ita", "por", "nld"),
    "Cyrillic": ("ukr", "rus", "bel", "bul", "srp"),
    "Arabic": ("ara", "fas", "urd"),
    "Han": ("chi_sim", "chi_tra"),
    "HanS": ("chi_sim",),
    "HanT": ("chi_tra",),
    "Japanese": ("jpn",),
    "Hangul": ("kor",),
    "Greek": ("ell",),
    "Hebrew": ("heb",),
    "Devanagari": ("hin", "mar", "nep"),
    "Thai": ("tha",),
}
MAX_LANGUAGES = 3  # more packs at once slow Tesseract down and confuse similar scripts
MISSING_ENGINE = (
    "OCR needs Tesseract, which is not installed (apt-get install tesseract-ocr tesseract-ocr-eng,"
    " plus the language packs of your documents), or turn OCR off with `ocr: false` on the collection"
)


class OcrUnavailable(UnusableFile):
    """The OCR engine (or any of its language packs) is not installed."""


@dataclass(frozen=True)
class OcrPage:
    """One page read by OCR: its text, mean word confidence (0-1), script and the languages read with."""

    text: str
    confidence: float
    script: str
    languages: str


@functools.cache
def engine_version() -> str:
    """`tesseract X.Y.Z`; OcrUnavailable when the program is missing."""
    if shutil.which("tesseract") is None:
        raise OcrUnavailable(MISSING_ENGINE)
    import pytesseract

    return f"tesseract {pytesseract.get_tesseract_version()}"


@functools.cache
def installed_languages() -> frozenset[str]:
    """The Tesseract language packs installed (`osd` included when its pack is)."""
    engine_version()
    import pytesseract

    return frozenset(pytesseract.get_languages(config=""))


def languages_for(script: str) -> str:
    """The `+`-joined installed language packs that read `script` (English where none does)."""
    installed = installed_languages()
    wanted = [lang for lang in SCRIPT_LANGUAGES.get(script, ()) if lang in installed][:MAX_LANGUAGES]
    if not wanted:
        wanted = ["eng"] if "eng" in installed else sorted(installed - {"osd"})[:1]
    if not wanted:
        raise OcrUnavailable(MISSING_ENGINE)
    return "+".join(wanted)


def detect_script(image: Image.Image, timeout: int = 0) -> str:
    """The page's script by Tesseract's OSD ("Latin" when the page has too little text to tell)."""
    import pytesseract

    if "osd" not in installed_languages():
        return "Latin"
    try:
        osd = pytesseract.image_to_osd(image, output_type=pytesseract.Output.DICT, timeout=timeout)
    except pytesseract.TesseractError:
        return "Latin"  # "Too few characters": a near-empty page
    return str(osd.get("script") or "Latin")


def read_image(image: Image.Image, timeout: int = 0) -> OcrPage:
    """The text of one page image: script by OSD, then Tesseract with that script's language packs."""
    import pytesseract

    engine_version()
    image = image.convert("L") if image.mode not in ("L", "RGB") else image
    script = detect_script(image, timeout)
    languages = languages_for(script)
    try:
        text, tsv = pytesseract.run_and_get_multiple_output(
            image, extensions=["txt", "tsv"], lang=languages, timeout=timeout
        )
    except RuntimeError as exc:  # pytesseract's timeout
        raise UnusableFile(f"OCR took longer than {timeout} s") from exc
    return OcrPage(_clean(text), _mean_confidence(tsv), script, languages)


def _clean(text: str) -> str:
    """Tesseract's text without its form feed and trailing spaces, paragraphs kept."""
    lines = [line.rstrip() for line in text.replace("\f", "").splitlines()]
    return "\n".join(lines).strip()


def _mean_confidence(tsv: str) -> float:
    """Mean word confidence (0-1) of Tesseract's TSV output (0 when it found no word)."""
    scores = []
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) == 12 and cells[11].strip():
            with contextlib.suppress(ValueError):
                if float(cells[10]) >= 0:
                    scores.append(float(cells[10]))
    return round(sum(scores) / len(scores) / 100, 4) if scores else 0.0


def cache_dir() -> Path:
    """CHUNKYARD_OCR_CACHE, else the user cache directory's `chunkyard/ocr`."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("chunkyard")) / "ocr"


def cache_key(source: bytes, part: str) -> str:
    """The cache key of one page: its source bytes' hash, which page (`part`) and the engine's settings."""
    settings = f"{engine_version()}|{sorted(installed_languages())}|{PDF_DPI}|{part}"
    return hashlib.sha256(hashlib.sha256(source).digest() + settings.encode()).hexdigest()


def cached_read(key: str, render: Any, timeout: int = 0) -> tuple[OcrPage, bool]:
    """The page cached under `key`, or `render()`'s image read and then cached; (page, from cache)."""
    path = cache_dir() / key[:2] / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, TypeError):
        return OcrPage(**json.loads(path.read_text(encoding="utf-8"))), True
    page = read_image(render(), timeout)
    with contextlib.suppress(OSError):  # a read-only cache costs time, never the page
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8") as tmp:
            json.dump(asdict(page), tmp, ensure_ascii=False)
        os.replace(tmp.name, path)
    return page, False


class PageBudget:
    """The time left to one file's OCR: the parse bound (CHUNKYARD_PARSE_TIMEOUT) less a margin, so a
    long scan stops between pages, keeps what it read (cached) and says which pages are left."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> int:
        return max(0, int(self.deadline - time.monotonic()))


def file_budget() -> PageBudget:
    from chunkyard.chunking.documents.parse_bounds import parse_timeout

    return PageBudget(parse_timeout() * 0.85)
