"""The `stack up` supervisor as a real process: restarts a dead service with backoff while the others
keep serving, stops cleanly on SIGHUP (a closed terminal), refuses a second start, and `stack down`
finds and stops every service even after the supervisor and its stack.json are gone (Postgres with a
fast shutdown, never SIGKILL).

The supervisor is `orchestration.stack_local.Stack` with the real Postgres service and two small
stand-ins for the Dagster and query processes (an HTTP server and a sleeper), so it runs in seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil

from tests.conftest import REPO_ROOT
from tests.service_process import free_port

SUPERVISOR = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from chunkyard.orchestration.stack import Health, Service, services
    from chunkyard.orchestration.stack_local import Stack, local_target

    home, pg_port, http_port = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    target = local_target(home, None, pg_port=pg_port, secret="s3cret p@ss")
    postgres = services(target)[0]
    web = Service(
        "web", ("python", "-m", "http.server", str(http_port), "--bind", "127.0.0.1"), {},
        Health("http", path="/"), port=http_port, depends_on=("postgres",),
    )
    sleeper = Service(
        "sleeper", ("python", "-c", "import time; time.sleep(100000)"), {}, Health("command", command=("true",)),
        depends_on=("postgres",),
    )
    sys.exit(Stack(target, defined=[postgres, web, sleeper]).up(120))
    """
)


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path, int]:
    script = tmp_path / "supervisor.py"
    script.write_text(SUPERVISOR)
    home, port = tmp_path / "home", free_port()
    log = open(tmp_path / "supervisor.log", "ab")  # noqa: SIM115  # the child writes to it
    process = subprocess.Popen(
        [sys.executable, str(script), str(home), str(free_port()), str(port)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, home / "stack", port


def _record(state: Path, process: subprocess.Popen, log: Path, ready: bool = True) -> dict:
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        with contextlib.suppress(OSError, ValueError):
            record = json.loads((state / "stack.json").read_text())
            if record["ready"] or not ready:
                return record
        time.sleep(0.2)
    raise AssertionError(f"not ready:\n{log.read_text(errors='replace')[-3000:]}")


def _pids(record: dict) -> dict[str, int]:
    return {name: int(s["pid"]) for name, s in record["services"].items()}


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _serves(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _cleanup(process: subprocess.Popen, state: Path) -> None:
    from chunkyard.orchestration.stack_stop import down

    with contextlib.suppress(ProcessLookupError):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
    down(state, timeout=30)


def test_a_dead_service_is_restarted_and_sighup_stops_everything(tmp_path: Path) -> None:
    process, state, port = _start(tmp_path)
    log = tmp_path / "supervisor.log"
    try:
        first = _pids(_record(state, process, log))
        os.kill(first["sleeper"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert _serves(port), "the other services must keep serving while one restarts"
            again = _pids(_record(state, process, log, ready=False))
            if again.get("sleeper", first["sleeper"]) != first["sleeper"] and _running(again["sleeper"]):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the sleeper was not restarted:\n{log.read_text()[-3000:]}")
        assert again["web"] == first["web"] and again["postgres"] == first["postgres"]
        assert "restarting it in 1 s" in log.read_text()

        from chunkyard.orchestration.stack_stop import running_stack

        assert "stack runs here already" in (running_stack(state) or "")

        process.send_signal(signal.SIGHUP)  # what closing the terminal sends
        assert process.wait(timeout=120) == 0
        assert not any(_running(pid) for pid in again.values()), "orphans after SIGHUP"
        assert "received fast shutdown request" in (state / "postgres.log").read_text()
        assert not (state / "stack.json").exists() and running_stack(state) is None
    finally:
        _cleanup(process, state)


def test_down_stops_every_service_without_the_supervisor_or_stack_json(tmp_path: Path) -> None:
    from chunkyard.orchestration.stack_stop import down, running_stack, stack_processes

    process, state, port = _start(tmp_path)
    log = tmp_path / "supervisor.log"
    try:
        pids = _pids(_record(state, process, log))
        os.kill(process.pid, signal.SIGKILL)  # the supervisor is gone, its services run on
        process.wait(timeout=30)
        (state / "stack.json").unlink()
        assert all(_running(pid) for pid in pids.values())
        refusal = running_stack(state)
        assert refusal and "`chunkyard stack down` stops them" in refusal and "\n" not in refusal

        said = down(state)
        assert "stopped Postgres" in said and "fast shutdown" in said, said
        assert not any(_running(pid) for pid in pids.values()) and stack_processes(state) == []
        assert "received fast shutdown request" in (state / "postgres.log").read_text()
        assert "immediate shutdown" not in (state / "postgres.log").read_text()
        assert down(state) == "no stack is running here"
    finally:
        _cleanup(process, state)
