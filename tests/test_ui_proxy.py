"""`chunkyard ui-proxy` in front of a real dagster-webserver: the API key or nothing, HTTP and websockets.

Both run as their own processes on loopback; the key must never appear in either one's output.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
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
        proxy_env["CHUNKYARD_HEADER_TIMEOUT_S"] = "2"  # short, for test_a_slow_client_is_closed
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
    assert _get(f"{base}/server_info?api_key={KEY}")[0] == 401  # never accepted, and never logged
    assert _get(f"{base}/{KEY}/x?token=t0ken123")[0] == 401
    # with the key given properly too, the one in the query is not forwarded to the webserver
    assert _get(f"{base}/server_info?api_key={KEY}&probe=2", {"Authorization": f"Bearer {KEY}"})[0] == 200
    for log in ("proxy.log", "web.log"):
        text = (folder / log).read_text(encoding="utf-8", errors="replace")
        assert KEY not in text and "t0ken123" not in text, log
    logged = (folder / "proxy.log").read_text(encoding="utf-8")
    assert "GET /server_info?probe=[redacted]" in logged and "GET /server_info?api_key=[redacted]" in logged


def test_each_session_gets_its_own_cookie_that_expires(proxy: tuple[str, Path]) -> None:
    from chunkyard.orchestration.ui_proxy import SESSION_SECONDS, session_cookie

    base, _ = proxy
    first = _get(f"{base}/server_info", _basic(KEY))[1]["set-cookie"]
    second = _get(f"{base}/server_info", _basic(KEY))[1]["set-cookie"]
    assert first.split(";", 1)[0] != second.split(";", 1)[0]  # one value per session
    assert f"Max-Age={SESSION_SECONDS}" in first and "HttpOnly" in first and "SameSite=Strict" in first
    cookie = first.split(";", 1)[0]
    status, headers, _ = _get(f"{base}/server_info", {"Cookie": cookie})
    assert status == 200 and "set-cookie" not in {name.lower() for name in headers}  # the session goes on
    # the proxy checks the age itself: a browser that kept the cookie longer is still refused
    expired = session_cookie(KEY, issued=int(time.time()) - SESSION_SECONDS - 1)
    assert _get(f"{base}/server_info", {"Cookie": f"chunkyard_ui={expired}"})[0] == 401
    # the old fixed value (one HMAC of the key for every session, no expiry) no longer works
    fixed = hmac.new(KEY.encode(), b"chunkyard-ui-proxy", hashlib.sha256).hexdigest()
    assert _get(f"{base}/server_info", {"Cookie": f"chunkyard_ui={fixed}"})[0] == 401
    signed_by_another_key = session_cookie(KEY + "x")
    assert _get(f"{base}/server_info", {"Cookie": f"chunkyard_ui={signed_by_another_key}"})[0] == 401


def test_a_slow_client_is_closed(proxy: tuple[str, Path]) -> None:
    """Headers not complete within CHUNKYARD_HEADER_TIMEOUT_S (2 s here): 408 and the connection closes."""
    port = int(proxy[0].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /server_info HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        received = b""
        while data := sock.recv(65536):
            received += data
    assert received.startswith(b"HTTP/1.1 408 "), received


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
