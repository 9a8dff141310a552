"""`chunkyard ui-proxy` in front of a real dagster-webserver: the API key or nothing, HTTP and websockets.

Both run as their own processes on loopback; the key must never appear in either one's output.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.service_process import free_port, wait_for

KEY = "ui-proxy-test-key-7f3a9c"
DEFINITIONS = """\
import dagster as dg


@dg.asset
def one() -> int:
    return 1


defs = dg.Definitions(assets=[one])
"""


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The proxy's base URL and the folder holding both processes' logs."""
    folder = tmp_path_factory.mktemp("ui_proxy")
    (folder / "defs.py").write_text(DEFINITIONS, encoding="utf-8")
    (folder / "home").mkdir()
    web_port, proxy_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "CHUNKYARD_API_KEY"}
    web_env = {**env, "DAGSTER_HOME": str(folder / "home")}
    web_command = [str(Path(sys.executable).parent / "dagster-webserver"), "-h", "127.0.0.1"]
    web_command += ["-p", str(web_port), "-f", str(folder / "defs.py")]
    with (folder / "web.log").open("wb") as web_log, (folder / "proxy.log").open("wb") as proxy_log:
        web = subprocess.Popen(web_command, env=web_env, stdout=web_log, stderr=subprocess.STDOUT)
        proxy_env = {**env, "CHUNKYARD_API_KEY": KEY, "PYTHONPATH": str(REPO_ROOT)}
        upstream = f"http://127.0.0.1:{web_port}"
        proxy_command = [
            sys.executable,
            "-m",
            "chunkyard.orchestration.cli",
            "ui-proxy",
            "--upstream",
            upstream,
        ]
        proxy_command += ["--port", str(proxy_port)]
        proxy = subprocess.Popen(
            proxy_command, env=proxy_env, cwd=folder, stdout=proxy_log, stderr=subprocess.STDOUT
        )
        try:
            wait_for(f"{upstream}/server_info", 200, timeout=180, process=web)
            wait_for(f"http://127.0.0.1:{proxy_port}/__chunkyard/healthz", 200, timeout=60, process=proxy)
            yield f"http://127.0.0.1:{proxy_port}", folder
        finally:
            _stop(proxy)
            _stop(web)


def _get(
    url: str, headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _basic(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"anyone:{password}".encode()).decode()}


def test_the_ui_needs_the_key(proxy: tuple[str, Path]) -> None:
    base, _ = proxy
    status, headers, _ = _get(f"{base}/server_info")
    assert status == 401 and headers["www-authenticate"].startswith("Basic ")  # the browser asks
    assert _get(f"{base}/server_info", _basic("wrong"))[0] == 401
    assert _get(f"{base}/server_info", {"Authorization": "Bearer wrong"})[0] == 401
    assert _get(f"{base}/", {"Cookie": "chunkyard_ui=forged"})[0] == 401

    status, headers, body = _get(f"{base}/server_info", _basic(KEY))
    assert status == 200 and json.loads(body)["dagster_version"]
    cookie = headers["set-cookie"].split(";", 1)[0]
    assert KEY not in cookie and "HttpOnly" in headers["set-cookie"]
    assert _get(f"{base}/", {"Authorization": f"Bearer {KEY}"})[0] == 200  # the UI's page
    query = json.dumps({"query": "{ version }"}).encode()
    graphql = {"Cookie": cookie, "Content-Type": "application/json"}
    status, _, body = _get(f"{base}/graphql", graphql, data=query)  # the cookie alone suffices
    assert status == 200 and json.loads(body)["data"]["version"]
    # a page of another site cannot use the browser's remembered credentials
    assert _get(f"{base}/graphql", {**graphql, "Origin": "http://evil.example"}, data=query)[0] == 403


def test_websockets_pass_with_the_key_only(proxy: tuple[str, Path]) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    base, _ = proxy
    url = base.replace("http", "ws", 1) + "/graphql"

    async def ack(headers: dict[str, str]) -> tuple[str | None, dict]:
        async with connect(url, subprotocols=["graphql-ws"], additional_headers=headers) as socket:
            await socket.send(json.dumps({"type": "connection_init", "payload": {}}))
            return socket.subprotocol, json.loads(await asyncio.wait_for(socket.recv(), 30))

    cookie = _get(f"{base}/server_info", _basic(KEY))[1]["set-cookie"].split(";", 1)[0]
    assert asyncio.run(ack({"Cookie": cookie})) == ("graphql-ws", {"type": "connection_ack"})
    assert asyncio.run(ack({"Authorization": f"Bearer {KEY}"}))[1]["type"] == "connection_ack"
    for refused in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Cookie": cookie, "Origin": "http://evil.example"},
    ):
        with pytest.raises(InvalidStatus):
            asyncio.run(ack(refused))


def test_the_key_is_never_logged_or_forwarded(proxy: tuple[str, Path]) -> None:
    base, folder = proxy
    assert _get(f"{base}/server_info?probe=1", {"Authorization": f"Bearer {KEY}"})[0] == 200
    assert _get(f"{base}/server_info", _basic(KEY + "x"))[0] == 401
    for log in ("proxy.log", "web.log"):
        text = (folder / log).read_text(encoding="utf-8", errors="replace")
        assert KEY not in text, log
    assert "GET /server_info?probe=1" in (folder / "proxy.log").read_text(encoding="utf-8")


def test_the_proxy_refuses_to_start_without_a_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CHUNKYARD_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "chunkyard.orchestration.cli", "ui-proxy", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode != 0 and "needs an API key" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
