"""Before the first `chunkyard index`, "nothing indexed yet" is a state: `search` says so in one line,
`serve` is ready with zero indexes and says so, `/v1/indexes` is an empty list, a search a 404."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.cli_helpers import CLI, cli_env
from tests.service_process import free_port

NOTHING = "nothing is indexed yet: `chunkyard index` builds the project's collections"


def test_search_and_serve_before_any_index(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(
        "# A\n\nThis short English note has not been indexed yet, so nothing can find it.\n"
    )
    for argv in (["init", str(project)], ["add", "mine", str(docs)]):
        assert (
            subprocess.run(
                [*CLI, *argv], cwd=project.parent if argv[0] == "init" else project, env=cli_env()
            ).returncode
            == 0
        )

    done = subprocess.run(
        [*CLI, "search", "anything"], cwd=project, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"chunkyard search: index 'mine/recursive-256' does not exist: {NOTHING}"
    ]

    port = free_port()
    server = subprocess.Popen(
        [*CLI, "serve", "--port", str(port)],
        cwd=project,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        ready = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                ready = httpx.get(f"{base}/readyz", timeout=5)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        assert ready is not None and ready.status_code == 200, ready and ready.text
        body = ready.json()
        assert (body["status"], body["schema_version"], body["indexes"], body["detail"]) == (
            "ready",
            0,
            0,
            NOTHING,
        )
        listed = httpx.get(f"{base}/v1/indexes", timeout=10)
        assert listed.status_code == 200 and listed.json() == []
        searched = httpx.post(
            f"{base}/v1/search", json={"query": "q", "index": "mine/recursive-256"}, timeout=30
        )
        assert searched.status_code == 404 and NOTHING in searched.json()["detail"]
        # the CLI goes through the running service and says the same
        done = subprocess.run(
            [*CLI, "search", "anything"],
            cwd=project,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2 and NOTHING in done.stderr and len(done.stderr.splitlines()) == 1
    finally:
        server.send_signal(signal.SIGTERM)
        _, log = server.communicate(timeout=60)
    assert b"UndefinedTable" not in log and b"warming failed" not in log, log.decode()[-2000:]
