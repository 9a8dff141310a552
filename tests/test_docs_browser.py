"""`/docs` and `/redoc` offline, in headless Chromium: the assets come from the installed package, not a CDN."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from tests.service_process import service
from tests.test_ui_browser import CHROMIUM, Browser

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)",
    ),
]

DEAD_URL = "postgresql://postgres@/postgres?host=/nonexistent-chunkyard-socket-dir"


def test_docs_and_redoc_render_the_search_operation_offline(tmp_path: Path) -> None:
    with service("--database-url", DEAD_URL, "--cold", wait_status=503) as (base, _):
        for page in ("docs", "redoc"):
            with urllib.request.urlopen(f"{base}/{page}", timeout=10) as response:
                html = response.read().decode()
            assert "/static-docs/" in html and "cdn" not in html.lower() and "googleapis" not in html
        browser = Browser(tmp_path / "chromium")
        try:
            text = browser.open(f"{base}/docs", ["/v1/search", "POST", "Authorize"], timeout=60)
            assert "Search" in text and "/v1/indexes" in text
            browser.screenshot(tmp_path / "docs.png")
            text = browser.open(f"{base}/redoc", ["/v1/search", "Search"], timeout=60)
            assert "X-API-Key" in text or "API Key" in text
        finally:
            browser.close()
