"""The Dagster UI in headless Chromium: the asset graph, the leaderboard's metadata, the metric plots.

Starts `chunkyard ui` in the background on a free port (after `chunkyard demo` filled the test
database), drives Debian's chromium over the DevTools protocol, waits for the page text an
operator needs, and saves screenshots to a temporary folder, or to CHUNKYARD_SCREENSHOTS when set
(`make screenshots` refreshes benchmarks/results/ui/ that way), so `make test` leaves the tree clean.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS_ENV = "CHUNKYARD_SCREENSHOTS"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1000",
    "--remote-debugging-port=0",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)",
    ),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def _stop_group(process: subprocess.Popen, grace: float = 40) -> None:
    """SIGTERM the leader (`chunkyard ui` stops dagster dev cleanly), then SIGKILL what is left of its group."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class Browser:
    """Just enough of the Chrome DevTools protocol: navigate, read the page text, screenshot."""

    def __init__(self, user_data_dir: Path) -> None:
        from websockets.sync.client import connect

        self.process = subprocess.Popen(
            [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = user_data_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not open its DevTools port")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            pages = [t for t in json.load(response) if t["type"] == "page"]
        self._connection = connect(
            pages[0]["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=20
        )
        self.ws = self._connection.__enter__()
        self.ids = itertools.count(1)
        self.call("Page.enable")

    def call(self, method: str, **params) -> dict:
        message_id = next(self.ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def text(self) -> str:
        result = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''")
        return result.get("result", {}).get("value", "") or ""

    def open(self, url: str, expect: list[str], timeout: float = 90, absent: tuple[str, ...] = ()) -> str:
        """Navigate and wait until every expected string (and none of `absent`) is on the page."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(e in text for e in expect) and not any(a in text for a in absent):
                time.sleep(2)  # let charts and the graph layout settle
                return self.text()
            time.sleep(1)
        missing = [e for e in expect if e not in text]
        raise AssertionError(
            f"{url}: {missing} not on the page after {timeout:.0f} s; page text: {text[:1500]}"
        )

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression).get("result", {}).get("value")

    def wait_for(self, expect: list[str], timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(e in text for e in expect):
                time.sleep(1.5)
                return text
            time.sleep(0.5)
        raise AssertionError(f"{[e for e in expect if e not in text]} not on the page; text: {text[:1500]}")

    def click_nth(self, label: str, n: int) -> bool:
        """Click the n-th button, link or tab whose text is exactly `label`."""
        script = (
            "(() => { const els = [...document.querySelectorAll('button, a, [role=tab]')]"
            f".filter(e => e.innerText.trim() === {json.dumps(label)});"
            f" const el = els[{n}]; if (!el) return false; el.click(); return true; }})()"
        )
        return bool(self.evaluate(script))

    def type_into(self, selector: str, value: str) -> None:
        """Set a React-controlled input's value the way typing would."""
        script = (
            f"(() => {{ const el = document.querySelector({json.dumps(selector)}); if (!el) return false;"
            " const set = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;"
            f" set.call(el, {json.dumps(value)}); el.dispatchEvent(new Event('input', {{bubbles: true}}));"
            " return true; })()"
        )
        assert self.evaluate(script), f"no input matches {selector}"

    def has_image(self, src_prefix: str) -> bool:
        script = (
            f"[...document.images].some(i => i.src.startsWith({json.dumps(src_prefix)})"
            " && i.naturalWidth > 100)"
        )
        return bool(self.evaluate(script))

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params = {"format": "png", "captureBeyondViewport": full_page}
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._connection.__exit__(None, None, None)
        _stop_group(self.process, grace=5)


@pytest.fixture
def ui_env(tmp_path: Path, pg_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME",)}
    env.update(
        DATABASE_URL=pg_url,
        CHUNKYARD_HOME=str(tmp_path / "home"),
        DAGSTER_HOME=str(tmp_path / "home" / "dagster"),
        PYTHONUNBUFFERED="1",
    )
    return env


def test_dagster_ui_shows_graph_leaderboard_and_plots(tmp_path: Path, ui_env: dict[str, str]) -> None:
    shots_dir = (
        Path(os.environ[SCREENSHOTS_ENV]).resolve() if os.environ.get(SCREENSHOTS_ENV) else tmp_path / "ui"
    )
    cli = [sys.executable, "-m", "chunkyard.orchestration.cli"]
    demo = subprocess.run(
        [*cli, "demo"], cwd=REPO_ROOT, env=ui_env, capture_output=True, text=True, timeout=600
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Leaderboard" in demo.stdout
    # A second run: nothing re-embedded, and the metric plots get a second point.
    again = subprocess.run(
        [*cli, "demo"], cwd=REPO_ROOT, env=ui_env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "Embeddings: 0 computed" in again.stdout

    port = _free_port()
    log = (tmp_path / "ui.log").open("w")
    ui = subprocess.Popen(
        [*cli, "ui", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO_ROOT,
        env=ui_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    browser = None
    try:
        _wait_http(f"{base}/server_info", timeout=180, process=ui)
        shots_dir.mkdir(parents=True, exist_ok=True)
        for old in shots_dir.glob("*.png"):
            old.unlink()
        browser = Browser(tmp_path / "chromium")

        # The global asset graph: every config's group with its chunks -> embeddings -> publish chain.
        browser.open(
            f"{base}/asset-groups",
            expect=["demo__recursive_256", "demo__token_256"],
            absent=("fetching statuses",),
        )
        browser.screenshot(shots_dir / "01_asset_graph.png")

        # One config's group: the lineage of its assets.
        browser.open(
            f"{base}/locations/chunkyard/asset-groups/demo__recursive_256",
            expect=["chunks", "embeddings", "bm25", "evaluation"],
        )
        browser.screenshot(shots_dir / "02_group_recursive_256.png")

        # The leaderboard asset: its metadata, then the markdown table and the chart it holds.
        browser.open(f"{base}/assets/demo/leaderboard", expect=["chart_path", "csv_path"])
        browser.screenshot(shots_dir / "03_leaderboard_asset.png")
        assert browser.click_nth("[Show Markdown]", 0)
        text = browser.wait_for(["recursive-256", "token-256", "hit_at_5", "mrr_at_5"])
        assert "hybrid" in text and "bm25" in text and "dense" in text
        browser.screenshot(shots_dir / "04_leaderboard_table.png")
        assert browser.click_nth("Close", 0)
        assert browser.click_nth("[Show Markdown]", 1)
        browser.wait_for(["chart"])
        assert browser.has_image("data:image/png")
        browser.screenshot(shots_dir / "05_leaderboard_chart.png")

        # The evaluation asset's metrics plotted over materialisations (filtered to hit@5).
        browser.open(f"{base}/assets/demo/recursive_256/evaluation", expect=["dense/hit_at_5", "Plots"])
        browser.type_into('input[placeholder="Filter metadata keys"]', "_at_5")
        assert browser.click_nth("Plots", 0)
        browser.wait_for(["hybrid/hit_at_5", "dense/mrr_at_5"])
        browser.screenshot(shots_dir / "06_evaluation_plots.png")
    finally:
        if browser is not None:
            browser.close()
        _stop_group(ui)
        log.close()
    shots = sorted(shots_dir.glob("*.png"))
    assert len(shots) == 6 and all(p.stat().st_size > 10_000 for p in shots)


def test_chromium_flags_are_the_documented_ones() -> None:
    assert shutil.which(str(CHROMIUM))
    assert {"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"} <= set(CHROMIUM_FLAGS)
