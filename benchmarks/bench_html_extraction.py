"""HTML main-content extraction: how much of a page's real text each extractor keeps, and how much of
its boilerplate (navigation, cookie banners, footers, related links) it drops.

Pages: hand-written here in the shapes the web has (a blog with a menu bar, a news page with a cookie
banner and related links, a documentation page with a table of contents, a `<div>`-only page without
semantic tags, a one-paragraph page), in Spanish, Ukrainian, Indonesian and English. Every content
sentence and every boilerplate string is known, so both shares are exact.

    pip install readability-lxml                  # the comparison only; not a chunkyard dependency
    python -m benchmarks.bench_html_extraction    # prints the table for benchmarks/results/html_extraction.md
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    name: str
    html: str
    content: tuple[str, ...]  # sentences of the main text
    boilerplate: tuple[str, ...]  # strings that are not


def _blog() -> Page:
    content = (
        "Las herramientas de jardinería duran más si se limpian después de cada uso.",
        "Una pala oxidada corta peor la tierra y cansa antes los brazos.",
        "Guarde las tijeras de podar en un lugar seco y engrase el muelle cada primavera.",
        "El mango de madera agradece una capa de aceite de linaza al final del verano.",
        "Con estos cuidados, un buen juego de herramientas acompaña a una familia durante décadas.",
    )
    boilerplate = (
        "Inicio | Blog | Herramientas | Contacto",
        "Suscríbase a nuestro boletín semanal",
        "Entradas relacionadas",
        "Cómo plantar tomates en maceta",
        "© 2025 El Huerto de Marta. Todos los derechos reservados.",
        "Aviso legal · Política de privacidad · Cookies",
    )
    html = f"""<!doctype html><html lang="es"><head><title>Cuidar las herramientas</title>
<style>body{{font-family:sans-serif}}</style><script>var a=1;</script></head><body>
<header><div class="logo">El Huerto de Marta</div><nav><a href="/">Inicio</a> | <a href="/blog">Blog</a> |
<a href="/h">Herramientas</a> | <a href="/c">Contacto</a></nav></header>
<div class="banner">{boilerplate[1]} <button>Suscribirse</button></div>
<main><article><h1>Cuidar las herramientas del jardín</h1><p class="meta">Publicado el 3 de mayo por Marta</p>
<p>{content[0]} {content[1]}</p><p>{content[2]}</p><h2>La madera</h2><p>{content[3]}</p><p>{content[4]}</p>
</article></main>
<aside><h3>{boilerplate[2]}</h3><ul><li><a href="/t">{boilerplate[3]}</a></li>
<li><a href="/r">Regar en verano sin malgastar agua</a></li></ul></aside>
<footer><p>{boilerplate[4]}</p><p>{boilerplate[5]}</p></footer></body></html>"""
    return Page("blog (es): menu, banner, related, footer", html, content, boilerplate)


def _news() -> Page:
    content = (
        "Міська рада ухвалила рішення про ремонт старого мосту через річку.",
        "Роботи почнуться у квітні й триватимуть до кінця осені.",
        "На час ремонту рух транспорту спрямують через північний об'їзд.",
        "Пішоходи зможуть користуватися тимчасовим настилом уздовж мосту.",
        "Кошторис робіт становить близько двадцяти мільйонів гривень.",
        "Мешканці просили про ремонт понад п'ять років.",
    )
    boilerplate = (
        "Ми використовуємо файли cookie, щоб покращити ваш досвід. Прийняти всі",
        "Новини | Економіка | Спорт | Культура | Погода",
        "Читайте також",
        "У місті відкрили новий парк",
        "Поділитися: Facebook Telegram Twitter",
        "Усі права захищені. Передрук лише з посиланням на джерело.",
    )
    html = f"""<html><head><title>Ремонт мосту</title></head><body>
<div id="cookie-consent" class="cookie-banner"><p>{boilerplate[0]}</p></div>
<div class="top"><ul class="menu"><li>Новини</li><li>Економіка</li><li>Спорт</li><li>Культура</li>
<li>Погода</li></ul><p class="menu-text">{boilerplate[1]}</p></div>
<div class="content"><h1>Міст відремонтують до зими</h1><span class="date">12 березня</span>
<p>{content[0]}</p><p>{content[1]} {content[2]}</p><p>{content[3]}</p><p>{content[4]} {content[5]}</p>
<div class="share">{boilerplate[4]}</div></div>
<div class="related"><h4>{boilerplate[2]}</h4><a href="/p">{boilerplate[3]}</a><a href="/q">Зима буде теплою</a></div>
<div class="footer">{boilerplate[5]}</div></body></html>"""
    return Page("news (uk): cookie banner, div layout, share, related", html, content, boilerplate)


def _docs() -> Page:
    content = (
        "Sebuah koleksi adalah satu folder dokumen dengan pola include dan exclude.",
        "Setiap konfigurasi indeks memotong dokumen menjadi potongan dengan ukuran tertentu.",
        "Perintah index membangun semua indeks dari koleksi yang disebutkan.",
        "Hasil pencarian menyebutkan dokumen, posisi awal dan akhir, serta skor.",
        "Jika folder tidak ada, perintah berhenti dengan pesan yang jelas.",
    )
    boilerplate = (
        "Daftar isi",
        "Pengantar · Instalasi · Konfigurasi · Referensi API",
        "Halaman sebelumnya: Instalasi",
        "Halaman berikutnya: Referensi API",
        "Dibangun dengan generator dokumentasi. Lisensi MIT.",
        "Edit halaman ini di repositori",
    )
    html = f"""<html><head><title>Konfigurasi</title></head><body>
<div class="sidebar"><h3>{boilerplate[0]}</h3><p>{boilerplate[1]}</p>
<ul><li>Pengantar</li><li>Instalasi</li><li>Konfigurasi</li><li>Referensi API</li></ul></div>
<div class="document"><div role="main"><h1>Konfigurasi</h1><p>{content[0]}</p><p>{content[1]}</p>
<h2>Membangun</h2><p>{content[2]}</p><pre>chunkyard index koleksi</pre><p>{content[3]}</p>
<div class="admonition"><p>{content[4]}</p></div><a class="edit" href="/e">{boilerplate[5]}</a></div></div>
<div class="nav-footer"><a>{boilerplate[2]}</a> <a>{boilerplate[3]}</a></div>
<footer>{boilerplate[4]}</footer></body></html>"""
    return Page("docs (id): sidebar table of contents, prev/next", html, content, boilerplate)


def _div_soup() -> Page:
    content = (
        "The harbour master publishes the tide tables every Monday morning.",
        "Pilots check the tables before guiding a ship through the narrow channel.",
        "At spring tides the water rises almost two metres higher than usual.",
        "Small boats should stay inside the breakwater when the wind turns north.",
    )
    boilerplate = (
        "Home Services Tides Weather Contact",
        "Login",
        "Sign up for alerts",
        "Harbour Authority 2025 - Terms - Privacy - Accessibility",
    )
    html = f"""<html><body><div><div><span>Home</span> <span>Services</span> <span>Tides</span>
<span>Weather</span> <span>Contact</span></div><div>{boilerplate[1]}</div></div>
<div><div><b>Tide tables</b></div><div>{content[0]} {content[1]}</div><div>{content[2]}</div>
<div>{content[3]}</div></div><div><div>{boilerplate[2]}</div></div><div>{boilerplate[3]}</div></body></html>"""
    return Page("div soup (en): no semantic tags", html, content, boilerplate[1:])


def _short() -> Page:
    content = ("Bread rises overnight.",)
    html = "<html><body><h1>Kitchen</h1><p>Bread rises overnight.</p></body></html>"
    return Page("one paragraph (en)", html, content, ())


PAGES = (_blog(), _news(), _docs(), _div_soup(), _short())


def _bs4(html: str) -> str:
    """chunkyard's extraction before: every visible text (scripts, styles and <head> dropped)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    return soup.get_text("\n")


def _chunkyard(html: str) -> str:
    from chunkyard.chunking.documents.webpage import parse_html

    return parse_html(html)[0]


def _trafilatura(html: str) -> str:
    import trafilatura

    return trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=True) or ""


def _readability(html: str) -> str:
    # Not a dependency: beside trafilatura it makes pip 23's resolver fail on lxml[html_clean] asked
    # twice. `pip install readability-lxml` for this comparison.
    from readability import Document

    return _bs4(Document(html).summary(html_partial=True))


def _normal(text: str) -> str:
    return " ".join(text.split())


def measure(extract: Callable[[str], str]) -> list[tuple[str, float, float, float]]:
    """(page, share of content sentences kept, share of boilerplate strings kept, ms) per page."""
    rows = []
    for page in PAGES:
        started = time.perf_counter()
        text = _normal(extract(page.html))
        took = (time.perf_counter() - started) * 1000
        kept = sum(_normal(s) in text for s in page.content) / len(page.content)
        noise = (
            sum(_normal(b) in text for b in page.boilerplate) / len(page.boilerplate)
            if page.boilerplate
            else 0.0
        )
        rows.append((page.name, kept, noise, took))
    return rows


def main() -> None:
    extractors = {
        "bs4 visible text (before)": _bs4,
        "trafilatura 2.3.1": _trafilatura,
        "readability-lxml 0.9": _readability,
        "chunkyard parse_html (trafilatura, else visible text)": _chunkyard,
    }
    print("| extractor | page | content kept | boilerplate kept | ms |")
    print("| --- | --- | ---: | ---: | ---: |")
    totals = {}
    for name, extract in extractors.items():
        extract(PAGES[0].html)  # imports and first-call set-up out of the timings
        rows = measure(extract)
        for page, kept, noise, took in rows:
            print(f"| {name} | {page} | {kept:.0%} | {noise:.0%} | {took:.1f} |")
        totals[name] = rows
    print()
    print("| extractor | content sentences kept | boilerplate strings kept |")
    print("| --- | ---: | ---: |")
    for name, rows in totals.items():
        content = sum(kept * len(p.content) for (_, kept, _, _), p in zip(rows, PAGES, strict=True))
        noise = sum(n * len(p.boilerplate) for (_, _, n, _), p in zip(rows, PAGES, strict=True))
        print(
            f"| {name} | {content:.0f}/{sum(len(p.content) for p in PAGES)} | "
            f"{noise:.0f}/{sum(len(p.boilerplate) for p in PAGES)} |"
        )


if __name__ == "__main__":
    main()
