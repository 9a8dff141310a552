"""OCR engines side by side: character error rate and seconds per page, by script and resolution.

Pages are drawn by benchmarks/scanned_pages.py (own lease text in English, Spanish, Ukrainian, Arabic
and Chinese, Noto fonts, tilted 0.8 degrees, Gaussian noise) at 150 and 300 dpi, so the ground truth is
the drawn text. Engines: Tesseract as chunkyard runs it (`chunking.documents.ocr.read_image`: the script
from OSD, then that script's installed language packs; the OSD time is included) and RapidOCR 3.10 with
the models inside its wheel (PP-OCRv6 small detection and recognition). CER = Levenshtein distance /
reference length, after NFKC and whitespace normalisation (all whitespace dropped for Chinese).

    python -m benchmarks.bench_ocr   # prints the Markdown table for benchmarks/results/formats.md
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import unicodedata
from pathlib import Path

from chunkyard.chunking.documents.ocr import read_image
from rapidfuzz.distance import Levenshtein

from benchmarks.scanned_pages import SAMPLES, render_page

RESULTS = Path(__file__).resolve().parent / "results" / "ocr.json"
DPIS = (150, 300)
REPEATS = int(os.environ.get("BENCH_OCR_REPEATS", "2"))


def normalise(text: str, language: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    return "".join(text.split()) if language == "zh" else " ".join(text.split())


def cer(reference: str, hypothesis: str, language: str) -> float:
    ref, hyp = normalise(reference, language), normalise(hypothesis, language)
    return Levenshtein.distance(ref, hyp) / max(1, len(ref))


def _rapidocr() -> object:
    from rapidocr import RapidOCR

    return RapidOCR(params={"Global.log_level": "critical"})


def main() -> None:
    rapid = _rapidocr()
    rows = []
    for dpi in DPIS:
        for sample in SAMPLES:
            page = render_page(sample.lines, sample.script, dpi)
            reference = "\n".join(sample.lines)
            engines = {
                "tesseract": lambda image: read_image(image).text,
                "rapidocr": lambda image: "\n".join(rapid(image).txts or ()),
            }
            for engine, run in engines.items():
                times, text = [], ""
                for _ in range(REPEATS):
                    started = time.perf_counter()
                    text = run(page)
                    times.append(time.perf_counter() - started)
                row = {
                    "engine": engine,
                    "language": sample.language,
                    "script": sample.script,
                    "dpi": dpi,
                    "cer": round(cer(reference, text, sample.language), 4),
                    "s_per_page": round(statistics.median(times), 2),
                }
                if engine == "tesseract":
                    row["read_as"] = read_image(page).languages
                rows.append(row)
                print(json.dumps(row, ensure_ascii=False), file=sys.stderr, flush=True)
    RESULTS.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("| language (script) | dpi | Tesseract CER | Tesseract s/page | RapidOCR CER | RapidOCR s/page |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for dpi in DPIS:
        for sample in SAMPLES:
            got = {r["engine"]: r for r in rows if r["language"] == sample.language and r["dpi"] == dpi}
            t, r = got["tesseract"], got["rapidocr"]
            print(
                f"| {sample.language} ({sample.script}; Tesseract read it as {t['read_as']}) | {dpi} "
                f"| {t['cer']:.1%} | {t['s_per_page']:.2f} | {r['cer']:.1%} | {r['s_per_page']:.2f} |"
            )


if __name__ == "__main__":
    main()
