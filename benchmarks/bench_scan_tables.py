"""Tables inside scans (issue 38): does img2table (borderless tables, Tesseract as its OCR) read the fleet
list of benchmarks/bench_formats.py from a scanned page well enough, and at what cost beside the OCR
chunkyard already runs on the page?

The page is drawn here (Noto Sans, 200 dpi, tilted 0.5 degrees, noise): a sentence and the 40-row fleet
list, columns aligned by whitespace, no ruling line. Reported: cells read right (exact, after
whitespace collapsing) out of all cells, header found, and seconds for img2table's table extraction vs
chunkyard's OCR of the same page (`chunking.documents.ocr.read_image`), measured side by side.

img2table is not a chunkyard dependency (it pulls opencv-contrib-python); to reproduce:
    python -m pip install img2table==2.0.0 && python -m benchmarks.bench_scan_tables
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from chunkyard.chunking.documents.ocr import read_image
from PIL import Image, ImageDraw, ImageFont

from benchmarks.bench_formats import FLEET, HEADER
from benchmarks.scanned_pages import font_path

DPI = 200


def draw_scan() -> Image.Image:
    font = ImageFont.truetype(str(font_path("Latin")), round(10 / 72 * DPI))
    page = Image.new("L", (round(8.27 * DPI), round(11.69 * DPI)), 255)
    draw = ImageDraw.Draw(page)
    draw.text((100, 80), "The harbour office keeps this list of the vessels registered.", font=font, fill=0)
    for r, row in enumerate([HEADER, *FLEET]):
        for c, cell in enumerate(row):
            draw.text((100 + c * 330, 170 + r * 50), cell, font=font, fill=0)
    page = page.rotate(0.5, fillcolor=255, expand=True)
    pixels = np.asarray(page, dtype=np.float32) + np.random.default_rng(1).normal(
        0, 8, (page.height, page.width)
    )
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def main() -> None:
    from img2table.document import Image as TableImage
    from img2table.ocr import TesseractOCR

    path = Path(tempfile.mkdtemp(prefix="bench-scan-tables-")) / "fleet.png"
    page = draw_scan()
    page.save(path)
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    runs: dict[str, list[float]] = {"img2table": [], "chunkyard OCR": []}
    rows: list[list[str]] = []
    for _ in range(2):  # side by side, alternating
        started = time.perf_counter()
        tables = TableImage(src=str(path)).extract_tables(
            ocr=TesseractOCR(n_threads=1, lang="eng"), borderless_tables=True, implicit_rows=True
        )
        runs["img2table"].append(time.perf_counter() - started)
        started = time.perf_counter()
        read_image(page)
        runs["chunkyard OCR"].append(time.perf_counter() - started)
        biggest = max(tables, key=lambda t: len(t.content), default=None)
        rows = [
            [" ".join((cell.value or "").split()) for cell in row]
            for row in (biggest.content.values() if biggest else [])
        ]
    expected = [HEADER, *FLEET]
    right = sum(
        1
        for got, want in zip(rows, expected, strict=False)
        for a, b in zip(got, want, strict=False)
        if a == b
    )
    print(
        json.dumps(
            {
                "tables": len(tables),
                "rows_read": len(rows),
                "cells_right": right,
                "cells": sum(len(row) for row in expected),
                "header_found": bool(rows) and rows[0] == HEADER,
                "median_seconds": {k: round(statistics.median(v), 2) for k, v in runs.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
