"""Celery scale-out on one machine: a loopback redis-server, `dagster-celery` workers and a run, as processes.

What `tests/test_celery.py` and `benchmarks/bench_scale.py` start, and what docs/deployment.md
describes for several machines: the broker, N workers (`dagster-celery worker start -A
dagster_celery.app`, one process each with the solo pool), and a run launched by `dagster asset
materialize` in its own process with the `celery` executor. Every process gets its settings
from the environment (DAGSTER_HOME with the same dagster.yaml, DATABASE_URL, CHUNKYARD_CONFIGS).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from chunkyard.orchestration.instance import DEFINITIONS_MODULE

REDIS_BINARY = "redis-server"
WORKER_APP = "dagster_celery.app"
READY_TIMEOUT_S = 120.0


def redis_server_binary() -> str | None:
    """The path of Debian's redis-server, or None where it is not installed."""
    return shutil.which(REDIS_BINARY) or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").is_file() else None
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bin(name: str) -> str:
    """A console script of this interpreter's environment (the venv's dagster, dagster-celery)."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def _stop(process: subprocess.Popen, timeout: float = 20.0) -> None:
    """Stop a process started here in its own session: SIGTERM to its group, then SIGKILL."""
    if process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def redis_server(workdir: Path, port: int | None = None) -> Iterator[str]:
    """A redis-server on 127.0.0.1 (no persistence, data in `workdir`); yields its URL, stops it after."""
    binary = redis_server_binary()
    if binary is None:
        raise FileNotFoundError(f"{REDIS_BINARY} not found: install Debian's redis-server package")
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / "redis.log").open("ab")
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(workdir)]
        + ["--save", "", "--appendonly", "no", "--protected-mode", "yes"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start; see {workdir / 'redis.log'}") from None
                time.sleep(0.1)
        yield url
    finally:
        _stop(process)
        log.close()


def celery_executor_config(broker: str, backend: str | None = None) -> dict:
    """The `celery` block of the chunkyard executor (and of the workers' `-y` file)."""
    return {"broker": broker, "backend": backend or broker}


def celery_run_config(broker: str, backend: str | None = None) -> dict:
    return {"execution": {"config": {"celery": celery_executor_config(broker, backend)}}}


@dataclass
class Workers:
    """Started workers: Celery node name -> pid of the process that executes its tasks."""

    pids: dict[str, int]
    logs: dict[str, Path]

    def log_text(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs.values() if path.exists())


def worker_pids(broker: str, backend: str | None = None, timeout: float = 1.0) -> dict[str, int]:
    """{node name: pid} of the workers that answer on `broker` now."""
    from celery import Celery

    app = Celery("chunkyard-probe", broker=broker, backend=backend or broker)
    try:
        stats = app.control.inspect(timeout=timeout).stats() or {}
    finally:
        app.close()
    return {name: int(info["pid"]) for name, info in stats.items()}


@contextmanager
def celery_workers(
    count: int,
    *,
    broker: str,
    env: Mapping[str, str],
    workdir: Path,
    backend: str | None = None,
    prefix: str = "chunkyard",
) -> Iterator[Workers]:
    """`count` dagster-celery workers (solo pool: one task at a time, in the worker's own process).

    Waits until every worker answers on the broker; yields their pids and log files; stops them.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "celery.yaml"
    config_path.write_text(yaml.safe_dump({"execution": {"config": celery_executor_config(broker, backend)}}))
    processes: list[subprocess.Popen] = []
    logs: dict[str, Path] = {}
    # dagster-celery starts `celery` from PATH: this environment's, as a venv's activate would.
    env = {**env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])}
    names = [f"{prefix}{i + 1}" for i in range(count)]
    try:
        for name in names:
            log_path = workdir / f"{name}.log"
            logs[name] = log_path
            with log_path.open("ab") as log:
                processes.append(
                    subprocess.Popen(
                        [_bin("dagster-celery"), "worker", "start", "-A", WORKER_APP, "-y", str(config_path)]
                        + ["-n", name, "-l", "INFO", "--", "--pool=solo", "--without-heartbeat"]
                        + ["--without-gossip", "--without-mingle"],
                        env=dict(env),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + READY_TIMEOUT_S
        pids: dict[str, int] = {}
        while True:
            pids = {n: p for n, p in worker_pids(broker, backend).items() if n.split("@")[0] in names}
            if len(pids) == count:
                break
            dead = [p.args for p in processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                text = "\n".join(path.read_text(errors="replace")[-2000:] for path in logs.values())
                raise RuntimeError(f"celery workers did not start ({len(pids)}/{count} answered):\n{text}")
            time.sleep(0.5)
        yield Workers(pids=pids, logs=logs)
    finally:
        for process in processes:
            _stop(process)


def materialize_all(
    run_config: dict,
    *,
    env: Mapping[str, str],
    log_path: Path,
    timeout: float | None = None,
    select: str = "*",
) -> int:
    """Run `dagster asset materialize` for every asset of the code location in its own process.

    The run's process is the orchestrator (it claims pool slots, submits steps); returns its exit
    status, output in `log_path`.
    """
    command = [_bin("dagster"), "asset", "materialize", "--select", select, "-m", DEFINITIONS_MODULE]
    command += ["--config-json", json.dumps(run_config)]
    with log_path.open("ab") as log:
        return subprocess.run(
            command, env=dict(env), stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False
        ).returncode


@dataclass(frozen=True)
class StepSpan:
    """When and where one step ran, from its STEP_START and STEP_SUCCESS/FAILURE events."""

    step_key: str
    start: float
    end: float
    pid: int | None
    succeeded: bool


def step_spans(instance, run_id: str) -> dict[str, StepSpan]:
    """{step key: StepSpan} of a run, read back from the instance's event log."""
    starts: dict[str, tuple[float, int | None]] = {}
    spans: dict[str, StepSpan] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or entry.step_key is None:
            continue
        if event.event_type_value == "STEP_START":
            starts[entry.step_key] = (entry.timestamp, event.pid)
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and entry.step_key in starts:
            start, pid = starts[entry.step_key]
            spans[entry.step_key] = StepSpan(
                entry.step_key, start, entry.timestamp, pid, event.event_type_value == "STEP_SUCCESS"
            )
    return spans


def worker_names(instance, run_id: str) -> dict[str, str]:
    """{step key: Celery worker node} from the workers' "Executing steps ... in celery worker" events."""
    names: dict[str, str] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or event.event_type_value != "ENGINE_EVENT" or not entry.step_key:
            continue
        metadata = getattr(event.event_specific_data, "metadata", None) or {}
        worker = metadata.get("Celery worker")
        if worker is not None:
            names[entry.step_key] = str(getattr(worker, "value", worker))
    return names
