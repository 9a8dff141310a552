"""Slow and greedy clients against the service process as `chunkyard serve` runs it: timeouts, caps, a clean log.

The service runs as its own process (tests.service_process, the server limits of
`retrieval.api.server_limits` read from the environment), its database unreachable: these limits act
before any route runs, and `/healthz` answers without a database.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from chunkyard.retrieval.observability.log_redaction import REDACTED, RedactSecrets, redact

from tests.service_process import REPO_ROOT, free_port, service, wait_for

DEAD_URL = "postgresql://postgres@/postgres?host=/nonexistent-chunkyard-socket-dir"
SHORT = {
    "CHUNKYARD_HEADER_TIMEOUT_S": "1.5",
    "CHUNKYARD_BODY_TIMEOUT_S": "1.5",
    "CHUNKYARD_KEEP_ALIVE_S": "1",
}
WAIT_S = 30  # how long a test waits for the server to close a connection (the timeouts are 1-1.5 s)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with service("--database-url", DEAD_URL, "--cold", wait_status=503, env=SHORT) as (base, _):
        yield int(base.rsplit(":", 1)[1])


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (socket.timeout if it never does)."""
    received = b""
    while True:
        data = sock.recv(65536)
        if not data:
            return received
        received += data


def test_a_client_that_never_finishes_its_headers_gets_408_and_is_closed(port: int) -> None:
    slow = [_connect(port) for _ in range(5)]
    for sock in slow:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    for sock in slow:
        with sock:
            answer = _read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"headers not complete within 1.5 s" in answer


def test_a_trickling_header_does_not_reset_the_deadline(port: int) -> None:
    """One byte every 0.3 s, faster than the timeout: the deadline is for the whole header block."""
    received, closed = b"", False
    with _connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        sock.settimeout(0.3)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not closed:
            try:
                sock.sendall(b"X")
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset: the server closed it while we sent
                closed = True
                break
            received += data
            closed = not data
    assert closed, "the server kept a trickling header open"
    assert received == b"" or received.startswith(b"HTTP/1.1 408 "), received


def test_a_body_shorter_than_its_content_length_gets_408_and_is_closed(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(
            b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b'{"query": '
        )
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"no request body bytes for 1.5 s" in answer


def test_an_idle_keep_alive_connection_is_closed(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _read_until_closed(sock)  # the answer, then the keep-alive timeout closes it
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"status":"ok"}')


def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    with _connect(port) as sock:
        assert _read_until_closed(sock) == b""


def test_headers_over_the_cap_get_431(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(40):
                sock.sendall(b"X-Pad: " + b"a" * 4000 + b"\r\n")
        except OSError:  # the server answered and closed while we were still sending
            pass
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_requests_that_keep_to_the_limits_still_work(port: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S) as http:
        for _ in range(3):  # one keep-alive connection, three requests
            assert http.get("/healthz").json() == {"status": "ok"}


def test_connections_over_the_cap_get_503_at_once_and_the_rest_are_served() -> None:
    env = {**SHORT, "CHUNKYARD_HEADER_TIMEOUT_S": "60", "CHUNKYARD_MAX_CONNECTIONS": "4"}
    with service("--database-url", DEAD_URL, "--cold", wait_status=503, env=env) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        opened = [_connect(port) for _ in range(5)]  # one over the cap; the others wait for headers
        try:
            answered = select.select(opened, [], [], WAIT_S)[0]
            assert len(answered) == 1, "exactly the connection over the cap is answered at once"
            answer = _read_until_closed(answered[0])
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"retry-after: 1" in answer.lower()
            kept = next(sock for sock in opened if sock is not answered[0])
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _read_until_closed(kept).startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in opened:
                sock.close()


def test_no_key_or_query_value_reaches_the_log(tmp_path: Path) -> None:
    """A key sent as `?api_key=`, in a path or in any parameter: the access log shows [redacted]."""
    key = "service-log-key-5d1e9b"
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        port = free_port()
        command = [sys.executable, "-m", "tests.service_process", str(port), "--database-url", DEAD_URL]
        command += ["--cold", "--api-key", key, "--log-level", "info"]
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(f"{base}/healthz", 200, 120, process)
            assert httpx.get(f"{base}/v1/indexes", params={"api_key": key}).status_code == 401
            assert (
                httpx.get(f"{base}/v1/indexes", params={"full": "true", "token": "hunter22"}).status_code
                == 401
            )
            assert httpx.get(f"{base}/v1/{key}/x").status_code == 404
            assert httpx.get(f"{base}/healthz?{key}").status_code == 200
        finally:
            process.terminate()
            process.wait(timeout=30)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert key not in text and "hunter22" not in text, text
    assert f"GET /v1/indexes?api_key={REDACTED}" in text
    assert f"GET /v1/indexes?full=true&token={REDACTED}" in text
    assert f"GET /v1/{REDACTED}/x" in text


def test_redaction_keeps_what_is_harmless() -> None:
    assert redact("/v1/indexes?full=true&x=") == "/v1/indexes?full=true&x="
    assert redact("/a?token=abc&full=1", ["zzzz"]) == f"/a?token={REDACTED}&full=1"
    args = ("1.2.3.4:5", "GET", "/p?k=v", 200)
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s "%s %s" %d', args, None)
    RedactSecrets(["secret"]).filter(record)
    assert record.getMessage() == f'1.2.3.4:5 "GET /p?k={REDACTED}" 200'


@pytest.mark.parametrize(
    ("command", "variable", "value"),
    [
        ("serve", "CHUNKYARD_HEADER_TIMEOUT_S", "soon"),
        ("serve", "CHUNKYARD_SEARCH_SLOTS", "0"),
        ("ui-proxy", "CHUNKYARD_BODY_TIMEOUT_S", "-1"),
    ],
)
def test_a_bad_limit_setting_is_one_line_naming_it(
    tmp_path: Path, command: str, variable: str, value: str
) -> None:
    (tmp_path / "chunkyard.yaml").write_text("collections: {}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHUNKYARD_")}
    env.update({variable: value, "CHUNKYARD_API_KEY": "limits-test-key", "PYTHONPATH": str(REPO_ROOT)})
    done = subprocess.run(
        [sys.executable, "-m", "chunkyard.orchestration.cli", command, "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and variable in done.stderr, done.stderr
