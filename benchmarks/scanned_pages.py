"""Pages rendered as scans: own multilingual text drawn with Debian's Noto fonts, tilted and noised.

Used by the OCR benchmark (benchmarks/bench_ocr.py) and the OCR tests: no page image is shipped, each
is drawn here at the resolution asked for, so the ground truth is the text that was drawn.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

FONT_DIRS = (Path("/usr/share/fonts/truetype/noto"), Path("/usr/share/fonts/opentype/noto"))
# script -> (font file, index in a collection) from fonts-noto-core / fonts-noto-cjk
FONTS: dict[str, tuple[str, int]] = {
    "Latin": ("NotoSans-Regular.ttf", 0),
    "Cyrillic": ("NotoSans-Regular.ttf", 0),
    "Arabic": ("NotoNaskhArabic-Regular.ttf", 0),
    "Han": ("NotoSansCJK-Regular.ttc", 2),  # index 2: Noto Sans CJK SC (simplified Chinese)
}


@dataclass(frozen=True)
class Sample:
    """One language's page: its ISO code, script and the lines drawn on it."""

    language: str
    script: str
    lines: tuple[str, ...]


SAMPLES: tuple[Sample, ...] = (
    Sample(
        "en",
        "Latin",
        (
            "The warehouse lease starts on the first of March and runs for three years.",
            "Rent is paid monthly; a late payment adds a fee of two percent.",
            "The tenant keeps the loading dock clean and reports any damage within a week.",
            "Either party may end the lease with ninety days of written notice.",
            "Heating and water are included, electricity is billed separately.",
            "Keys are returned to the landlord on the last day of the term.",
        ),
    ),
    Sample(
        "es",
        "Latin",
        (
            "El contrato de alquiler del almacén empieza el primero de marzo.",
            "La renta se paga cada mes; un pago tardío añade una multa del dos por ciento.",
            "El inquilino mantiene limpio el muelle de carga y avisa de cualquier daño.",
            "Cualquiera de las partes puede terminar el contrato con noventa días de aviso.",
            "La calefacción y el agua están incluidas; la electricidad se factura aparte.",
            "Las llaves se devuelven al propietario el último día del plazo.",
        ),
    ),
    Sample(
        "uk",
        "Cyrillic",
        (
            "Оренда складу починається першого березня і триває три роки.",
            "Плата вноситься щомісяця; за прострочення нараховується два відсотки.",
            "Орендар утримує вантажну рампу в чистоті та повідомляє про пошкодження.",
            "Будь-яка сторона може припинити оренду з письмовим повідомленням за дев'яносто днів.",
            "Опалення та вода включені, електроенергія оплачується окремо.",
            "Ключі повертаються власникові в останній день строку.",
        ),
    ),
    Sample(
        "ar",
        "Arabic",
        (
            "يبدأ عقد إيجار المستودع في الأول من مارس ويستمر ثلاث سنوات.",
            "يدفع الإيجار شهريا وتضاف غرامة عند التأخر في الدفع.",
            "يحافظ المستأجر على نظافة رصيف التحميل ويبلغ عن أي ضرر.",
            "يجوز لأي طرف إنهاء العقد بإشعار مكتوب قبل تسعين يوما.",
            "التدفئة والماء مشمولان أما الكهرباء فتدفع بشكل منفصل.",
            "تعاد المفاتيح إلى المالك في اليوم الأخير من المدة.",
        ),
    ),
    Sample(
        "zh",
        "Han",
        (
            "仓库租赁合同从三月一日开始，为期三年。",
            "租金每月支付，逾期付款加收百分之二的费用。",
            "租户保持装卸平台清洁，并在一周内报告任何损坏。",
            "任何一方均可提前九十天书面通知终止租约。",
            "暖气和水费已包含在内，电费另行计算。",
            "租期最后一天将钥匙交还给房东。",
        ),
    ),
)


def font_path(script: str) -> Path | None:
    """The Noto font file for `script`, or None where the Debian font package is not installed."""
    name = FONTS[script][0]
    for folder in FONT_DIRS:
        if (folder / name).is_file():
            return folder / name
    return None


def render_page(
    lines: tuple[str, ...] | list[str],
    script: str,
    dpi: int,
    *,
    rotate_degrees: float = 0.8,
    noise: float = 10.0,
    seed: int = 7,
    point_size: float = 12.0,
) -> Image.Image:
    """An A5-wide greyscale page with `lines` at `point_size`, tilted by `rotate_degrees` and with
    Gaussian noise of standard deviation `noise` (grey levels), as a scanner at `dpi` would give it."""
    path = font_path(script)
    if path is None:
        raise FileNotFoundError(f"no Noto font for {script} (install fonts-noto-core and fonts-noto-cjk)")
    size_px = round(point_size / 72 * dpi)
    font = ImageFont.truetype(str(path), size_px, index=FONTS[script][1])
    margin = round(0.5 * dpi)
    line_height = round(size_px * 1.6)
    widths = [font.getlength(line) for line in lines]
    width = max(round(5.83 * dpi), int(max(widths)) + 2 * margin)
    height = 2 * margin + line_height * len(lines)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    for row, line in enumerate(lines):
        y = margin + row * line_height
        x = width - margin - widths[row] if script == "Arabic" else margin
        draw.text((x, y), line, font=font, fill=0)
    page = page.rotate(rotate_degrees, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    if noise:
        pixels = np.asarray(page, dtype=np.float32)
        pixels = pixels + np.random.default_rng(seed).normal(0.0, noise, pixels.shape)
        page = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        page = page.filter(ImageFilter.GaussianBlur(0.3 * dpi / 150))
    return page


def page_pdf(pages: list[Image.Image], dpi: int) -> bytes:
    """The pages as an image-only PDF (no text layer), as a scanner writes one."""
    out = io.BytesIO()
    first, *rest = [page.convert("RGB") for page in pages]
    first.save(out, format="PDF", save_all=True, append_images=rest, resolution=dpi)
    return out.getvalue()
