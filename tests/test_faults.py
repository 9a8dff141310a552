"""The fault suite: after each fault, with no new edit, the running stack converges to the folder.

One `chunkyard stack up` (a tiny two-document collection, a 1 s sensor interval) is put through six
faults in turn. Each case appends a unique word to a document, injects its fault while that edit is
being indexed, and then, without touching the folder again, waits until the word is searchable
(`POST /v1/search`, BM25) and no index is behind its documents (`/v1/indexes` lag 0 everywhere, and
the folder's hash is what `documents` holds). The faults: `kill -9` of the run's process (its pid
read from the run's RUN_START event), `kill -9` of dagster-daemon, a Postgres fast stop (SIGINT to the
postmaster; the supervisor starts it again), `chunkyard stack down` during a run and `stack up`
again, SIGHUP to the supervisor (it stops the stack cleanly, with no process left behind; then `stack
up`), and `kill -9` of the query service with an edit made while it is down. Marked `faults`:
`make test-faults` runs them (the suite alone on the shared 2-core machine: 4.5 min at load 3, 27.6 min
at load 13-30), `make test` does not. `make bench-faults` writes the
seconds to convergence per case to benchmarks/results/faults.md (CHUNKYARD_FAULTS_RESULTS: the JSON).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.service_process import free_port
from tests.test_stack import COLLECTION, CONFIG, Stack, post_json, write_project

pytestmark = [pytest.mark.faults, pytest.mark.slow]

EDITED = "alpha.md"
# One chunk holds the whole edited document, so no appended word is cut at a chunk boundary.
FAULT_CONFIG = "token-256"
INDEX = f"{COLLECTION}/{FAULT_CONFIG}"
CONVERGE_S = 600  # a bound, not a goal (benchmarks/results/faults.md has the times)
RESULTS_ENV = "CHUNKYARD_FAULTS_RESULTS"
PORTS_ENV = "CHUNKYARD_FAULTS_PORTS"  # first of four consecutive ports (default: free ones)


@dataclass
class Faulted:
    """The stack under test, replaced when a case restarts it, and the seconds each case took."""

    project: Path
    docs: Path
    logs: Path
    ports: dict[str, int]
    stack: Stack
    results: list[dict[str, Any]] = field(default_factory=list)
    starts: int = 1

    @property
    def state(self) -> Path:
        return self.project / ".chunkyard" / "stack"

    def database_url(self) -> str:
        secret = (self.state / "pgpass").read_text(encoding="utf-8").strip()
        return f"postgresql://chunkyard:{secret}@127.0.0.1:{self.ports['pg']}/chunkyard"

    def start(self) -> None:
        self.starts += 1
        self.stack = Stack(self.project, self.logs / f"stack-up-{self.starts}.log", self.ports)
        self.stack.wait_ready()

    def pid(self, service: str) -> int:
        record = json.loads(self.stack.record_path.read_text(encoding="utf-8"))
        return int(record["services"][service]["pid"])

    def query(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.ports['query']}{path}"
        if body is not None:
            return post_json(url, body, timeout=10)
        import urllib.request

        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, json.loads(response.read())
        except (OSError, ValueError):
            return 0, None


def _ports() -> dict[str, int]:
    base = os.environ.get(PORTS_ENV)
    if base:
        first = int(base)
        return {"pg": first, "web": first + 1, "query": first + 2, "code": first + 3}
    return {"pg": free_port(), "web": free_port(), "query": free_port(), "code": free_port()}


def _sql(faulted: Faulted, query: str, params: tuple = ()) -> list[tuple]:
    """A query on the stack's database; [] while it is down (a fault case may have stopped it)."""
    try:
        with psycopg.connect(faulted.database_url(), connect_timeout=3) as conn:
            return conn.execute(query, params).fetchall()
    except psycopg.Error:
        return []


def searchable(faulted: Faulted, word: str) -> bool:
    status, body = faulted.query("/v1/search", {"query": word, "index": INDEX, "k": 5, "mode": "bm25"})
    return status == 200 and any(word in hit["text"] for hit in body["results"])


def nothing_stale(faulted: Faulted) -> bool:
    """Every index is 0 documents behind, and `documents` holds the folder's current text."""
    status, listed = faulted.query("/v1/indexes")
    if status != 200 or not listed or any(i["lag"]["documents_behind"] for i in listed):
        return False
    stored = dict(_sql(faulted, "SELECT doc_id, sha256 FROM documents WHERE collection = %s", (COLLECTION,)))
    folder = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in faulted.docs.glob("*.md")}
    return stored == folder


def edit(faulted: Faulted, case: str) -> tuple[str, float]:
    """Append a unique word to the edited document (whole-file replace); the word and the time."""
    word = f"fault{uuid.uuid4().hex[:10]}"
    path = faulted.docs / EDITED
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(path.read_text(encoding="utf-8") + f"\nThe {case} case adds {word}.\n", encoding="utf-8")
    tmp.replace(path)
    return word, time.monotonic()


def run_after(faulted: Faulted, since_wall: float, statuses: tuple[str, ...], timeout: float = 300) -> str:
    """The id of an indexing run created after `since_wall` (epoch s) once it has one of `statuses`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        faulted.stack.alive()
        rows = _sql(
            faulted,
            "SELECT r.run_id, r.status FROM dagster.runs r JOIN dagster.run_tags t ON t.run_id = r.run_id"
            " AND t.key = 'chunkyard/collections' AND t.value = %s"
            " WHERE r.create_timestamp >= to_timestamp(%s) AT TIME ZONE 'UTC' ORDER BY r.create_timestamp",
            (COLLECTION, since_wall - 1),
        )
        for run_id, status in rows:
            if status in statuses:
                return run_id
        time.sleep(0.2)
    raise AssertionError(f"no run {statuses} after the edit within {timeout:.0f} s\n{faulted.stack.output()}")


def run_pid(faulted: Faulted, run_id: str, timeout: float = 120) -> int:
    """The pid of `run_id`'s process, from its RUN_START event (what the dead-run sweep reads too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _sql(
            faulted,
            "SELECT event FROM dagster.event_logs WHERE run_id = %s AND dagster_event_type = 'PIPELINE_START'",
            (run_id,),
        )
        if rows:
            return int(json.loads(rows[0][0])["dagster_event"]["pid"])
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never started\n{faulted.stack.output()}")


def converge(faulted: Faulted, case: str, words: list[str], edited: float, fault: float) -> None:
    """Wait (no new edit) until every word is searchable and nothing is stale; record the seconds."""
    deadline = time.monotonic() + CONVERGE_S
    while time.monotonic() < deadline:
        faulted.stack.alive()
        if all(searchable(faulted, w) for w in words) and nothing_stale(faulted):
            now = time.monotonic()
            faulted.results.append(
                {
                    "case": case,
                    "after_fault_s": round(now - fault, 1),
                    "after_edit_s": round(now - edited, 1),
                    "failed_runs": _failed_runs(faulted),
                }
            )
            return
        time.sleep(0.5)
    raise AssertionError(f"{case}: not converged within {CONVERGE_S} s\n{faulted.stack.output()}")


def _failed_runs(faulted: Faulted) -> int:
    rows = _sql(faulted, "SELECT count(*) FROM dagster.runs WHERE status IN ('FAILURE', 'CANCELED')")
    return int(rows[0][0]) if rows else -1


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulted]:
    root = tmp_path_factory.mktemp("faults")
    project = root / "project"
    docs = write_project(project)
    settings = yaml.safe_load((project / "chunkyard.yaml").read_text(encoding="utf-8"))
    config = settings["indexes"].pop(CONFIG)
    config["chunker"]["size"] = 256
    settings["indexes"][FAULT_CONFIG] = config
    settings["collections"][COLLECTION]["indexes"] = [FAULT_CONFIG]
    del settings["collections"][COLLECTION]["eval_set"]  # no evaluation runs competing for the CPUs
    (project / "chunkyard.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    ports = _ports()
    stack = Stack(project, root / "stack-up-1.log", ports)
    faulted = Faulted(project, docs, root, ports, stack)
    load_before = _load()
    try:
        stack.wait_ready()
        deadline = time.monotonic() + CONVERGE_S
        while not nothing_stale(faulted):  # the initial scan's run
            faulted.stack.alive()
            assert time.monotonic() < deadline, faulted.stack.output()
            time.sleep(0.5)
        yield faulted
    finally:
        faulted.stack.stop()
        from chunkyard.orchestration.stack_stop import down

        down(faulted.state, timeout=60)  # whatever a failed case left
        target = os.environ.get(RESULTS_ENV)
        if target and faulted.results:
            report = {"load_before": load_before, "load_after": _load(), "cases": faulted.results}
            Path(target).write_text(json.dumps(report, indent=2), encoding="utf-8")


def test_kill_9_of_the_run_process(faulted: Faulted) -> None:
    since = time.time()
    word, edited = edit(faulted, "run kill")
    pid = run_pid(faulted, run_after(faulted, since, ("STARTED",)))
    os.kill(pid, signal.SIGKILL)
    converge(faulted, "kill -9 of the run process", [word], edited, time.monotonic())


def test_kill_9_of_the_daemon(faulted: Faulted) -> None:
    since = time.time()
    word, edited = edit(faulted, "daemon kill")
    run_after(faulted, since, ("STARTING", "STARTED"))
    os.kill(faulted.pid("dagster-daemon"), signal.SIGKILL)
    converge(faulted, "kill -9 of dagster-daemon", [word], edited, time.monotonic())


def test_postgres_stop_and_start(faulted: Faulted) -> None:
    since = time.time()
    word, edited = edit(faulted, "postgres stop")
    run_after(faulted, since, ("STARTING", "STARTED"))
    os.kill(faulted.pid("postgres"), signal.SIGINT)  # a fast shutdown; the supervisor starts it again
    converge(faulted, "Postgres fast stop, started again", [word], edited, time.monotonic())


def test_stack_down_during_a_run(faulted: Faulted) -> None:
    since = time.time()
    word, edited = edit(faulted, "stack down")
    run_after(faulted, since, ("STARTING", "STARTED"))
    fault = time.monotonic()
    env = {**os.environ, "CHUNKYARD_PROJECT": str(faulted.project)}
    for name in ("DATABASE_URL", "CHUNKYARD_HOME", "DAGSTER_HOME", "CHUNKYARD_CONFIGS"):
        env.pop(name, None)
    down = subprocess.run(
        [sys.executable, "-m", "chunkyard.orchestration.cli", "stack", "down"],
        cwd=faulted.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert down.returncode == 0, down.stderr
    assert faulted.stack.process.wait(timeout=60) == 0, faulted.stack.output()
    faulted.start()
    converge(faulted, "`stack down` during a run, then `stack up`", [word], edited, fault)


def test_sighup_to_the_supervisor(faulted: Faulted) -> None:
    from chunkyard.orchestration.stack_stop import postmaster_pid, stack_processes

    since = time.time()
    word, edited = edit(faulted, "sighup")
    run_after(faulted, since, ("STARTING", "STARTED"))
    fault = time.monotonic()
    faulted.stack.process.send_signal(signal.SIGHUP)  # what closing its terminal sends
    assert faulted.stack.process.wait(timeout=240) == 0, faulted.stack.output()
    assert not faulted.stack.record_path.exists()
    assert stack_processes(faulted.state) == [], "the stopped stack left processes behind"
    assert postmaster_pid(faulted.state / "pgdata") is None
    faulted.start()
    converge(faulted, "SIGHUP to the supervisor, then `stack up`", [word], edited, fault)


def test_kill_9_of_the_query_service_while_indexing_goes_on(faulted: Faulted) -> None:
    daemon = faulted.pid("dagster-daemon")
    since = time.time()
    word, edited = edit(faulted, "query kill")
    fault = time.monotonic()
    os.kill(faulted.pid("query"), signal.SIGKILL)
    second, _ = edit(faulted, "while the query service is down")
    run_after(faulted, since, ("SUCCESS",))  # indexing went on
    converge(
        faulted, "kill -9 of the query service (an edit while it is down)", [word, second], edited, fault
    )
    assert faulted.pid("dagster-daemon") == daemon, "the daemon was restarted too"
