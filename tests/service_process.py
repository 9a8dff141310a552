"""Run the query service as its own uvicorn process, as `chunkyard serve` does, for tests and benchmarks.

`python -m tests.service_process PORT --pg-data DIR` attaches to (or starts) the embedded Postgres in
DIR, sets DATABASE_URL like `cmd_serve`, and serves `retrieval.api.service:app` (warm); `--database-url`
serves a given URL, `--cold` skips warming, `--api-key` requires a key, `--log-level info` writes the
access log. The server limits come from the environment (`retrieval.api.server_limits`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def status_of(url: str, timeout: float = 5) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def wait_for(url: str, status: int, timeout: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"service exited with {process.returncode} before {url} answered {status}")
        if status_of(url) == status:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer {status} within {timeout:.0f} s")


def rss_kib(pid: int) -> int:
    """VmRSS of a process, in KiB (/proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@contextlib.contextmanager
def serve_in_thread(app: Any, timeout: float = 20) -> Iterator[str]:
    """`app` under uvicorn on a free loopback port in this process; its base URL while it runs."""
    import threading

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True, name="test-uvicorn")
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the test service did not start on 127.0.0.1:{port}")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def start_service(
    *args: str,
    python: str = sys.executable,
    root: Path = REPO_ROOT,
    env: dict[str, str] | None = None,
    ready_timeout: float = 120,
    wait_status: int = 200,
    stdout: int | None = None,
    stderr: int | None = None,
) -> tuple[str, subprocess.Popen]:
    """`python -m tests.service_process PORT ARGS` run in the checkout `root` (another checkout's service
    for a side-by-side) on a free port: (base URL, process), once /readyz answers `wait_status` (0: do
    not wait). `env` is its whole environment (default: this process's); stopped again if it never
    gets ready."""
    port = free_port()
    process = subprocess.Popen(
        [python, "-m", "tests.service_process", str(port), *args],
        cwd=root,
        env=dict(os.environ) if env is None else env,
        stdout=stdout,
        stderr=stderr,
    )
    base = f"http://127.0.0.1:{port}"
    if wait_status:
        try:
            wait_for(f"{base}/readyz", wait_status, ready_timeout, process)
        except BaseException:
            stop_service(process)
            raise
    return base, process


def stop_service(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, as a supervisor stops `chunkyard serve`; SIGKILL after `timeout` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def service(
    *args: str, ready_timeout: float = 120, wait_status: int = 200, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """The service in its own process on a free port: (base URL, process); stopped with SIGTERM.

    Waits until /readyz answers `wait_status` (0: do not wait); `env` is added to this process's."""
    base, process = start_service(
        *args, env={**os.environ, **(env or {})}, ready_timeout=ready_timeout, wait_status=wait_status
    )
    try:
        yield base, process
    finally:
        stop_service(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--pg-data", help="embedded Postgres data folder")
    parser.add_argument("--database-url")
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--api-key")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    from chunkyard.retrieval.api.server_limits import serve
    from chunkyard.retrieval.api.service import create_app
    from chunkyard.retrieval.store.db import embedded_database_url

    os.environ["DATABASE_URL"] = args.database_url or embedded_database_url(args.pg_data)
    app = create_app(api_key=args.api_key, warm=not args.cold)
    # as `chunkyard serve` runs it: its timeouts, connection cap and redacted log
    serve(app, "127.0.0.1", args.port, secrets=[args.api_key or ""], log_level=args.log_level)


if __name__ == "__main__":
    main()
