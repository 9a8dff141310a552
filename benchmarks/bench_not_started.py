"""A `chunkyard index` killed at NOT_STARTED: how long the next `chunkyard index` of the collection waits.

One scratch project (one small document, the bundled ONNX model) is indexed once; then, per round and
per version (this checkout's Python and, with `--baseline`, another's, e.g. main's venv), a
`chunkyard index` is SIGKILLed right after Dagster created its run (the run stays NOT_STARTED), and the
next `chunkyard index` is timed: seconds until it starts indexing ("Indexing ..."), until it exits, or
"still waiting" after `--give-up` seconds (then it is stopped with SIGTERM). Writes
benchmarks/results/faults_not_started.json; `make bench-faults` renders it into faults.md.

    python -m benchmarks.bench_not_started [--baseline ../before/.venv/bin/python] [--rounds 2]
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
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "faults_not_started.json"
STATE_VARIABLES = ("CHUNKYARD_PROJECT", "CHUNKYARD_HOME", "CHUNKYARD_CONFIGS", "DATABASE_URL", "DAGSTER_HOME")
SESSION_ENV = "CHUNKYARD_RUN_SESSION"  # orchestration.cli_session: run the command in this process

# `chunkyard index` that SIGKILLs itself right after Dagster created its run (NOT_STARTED).
KILLED_AT_NOT_STARTED = textwrap.dedent(
    """
    import os, signal, sys
    from dagster import DagsterInstance

    create = DagsterInstance.create_run_for_job

    def create_then_die(self, *args, **kwargs):
        run = create(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return run

    DagsterInstance.create_run_for_job = create_then_die
    from chunkyard.orchestration.cli import main

    sys.exit(main(sys.argv[1:]))
    """
)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def next_index(python: str, project: Path, give_up: float) -> dict[str, Any]:
    """Time one `chunkyard index` (with `python`'s chunkyard) after a killed one."""
    process = subprocess.Popen(
        [python, "-m", "chunkyard.orchestration.cli", "index"],
        cwd=project,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = time.monotonic()
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.monotonic() - started, line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        process.wait(timeout=give_up)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # passed on to its run's session (cli_session)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    ended = time.monotonic() - started
    reader.join(30)
    unblocked = next((t for t, line in lines if line.startswith("Indexing ")), None)
    return {
        "unblocked_s": unblocked,
        "exit_s": ended,
        "returncode": process.returncode,
        "waited": any("Waiting for the run in progress" in line for _, line in lines),
        "swept": next((line for _, line in lines if line.startswith("Marked ")), ""),
    }


def kill_at_not_started(python: str, project: Path, script: Path) -> int:
    done = subprocess.run(
        [python, str(script), "index"],
        cwd=project,
        env={**_env(), SESSION_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="the Python of another chunkyard install to compare with")
    parser.add_argument(
        "--baseline-name", default="baseline", help="its name in the table (e.g. main's commit)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--give-up", type=float, default=120.0, help="seconds before a wait counts as stuck")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    versions = {"this checkout": sys.executable}
    if args.baseline:
        versions[args.baseline_name] = args.baseline
    load_before = _uptime()
    with tempfile.TemporaryDirectory(prefix="bench-not-started-") as scratch:
        root = Path(scratch)
        docs = root / "docs"
        docs.mkdir()
        (docs / "tide.md").write_text("# Tides\n\nThe harbour pilot reads the tide tables at dawn.\n")
        project = root / "work"
        project.mkdir()
        script = root / "killed_index.py"
        script.write_text(KILLED_AT_NOT_STARTED)
        cli = [sys.executable, "-m", "chunkyard.orchestration.cli"]
        for step in (["init"], ["add", "notes", str(docs)], ["index"]):
            subprocess.run(
                [*cli, *step], cwd=project, env=_env(), check=True, capture_output=True, timeout=900
            )
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in versions}
        for _ in range(args.rounds):
            for name, python in versions.items():
                killed = kill_at_not_started(python, project, script)
                row = next_index(python, project, args.give_up)
                row["killed_returncode"] = killed
                rows[name].append(row)
                print(name, row, flush=True)
    report = {
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "load_before": load_before,
        "load_after": _uptime(),
        "give_up_s": args.give_up,
        "versions": versions,
        "rows": rows,
    }
    args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"wrote {args.out}", flush=True)
    return 0


def section(report: dict[str, Any]) -> list[str]:
    """The Markdown section of faults.md for this benchmark's report."""
    lines = [
        "## A `chunkyard index` killed at NOT_STARTED",
        "",
        f"`python -m benchmarks.bench_not_started` (part of `make bench-faults`), measured {report['measured']} "
        f"on {report['machine']}. Load (`uptime`) before: `{report['load_before']}`; after: "
        f"`{report['load_after']}`.",
        "",
        "A scratch project (one small document) indexed once; then `chunkyard index` is SIGKILLed right "
        "after Dagster created its run (it stays NOT_STARTED, tagged with its collection), and the next "
        "`chunkyard index` of the collection is timed from its start. Rounds alternate the versions.",
        "",
        "| version | rounds | next index unblocked after (s, median) | next index exited after (s, median) | "
        "waited for the dead run |",
        "|---|---|---|---|---|",
    ]
    for name, rows in report["rows"].items():
        unblocked = [r["unblocked_s"] for r in rows if r["unblocked_s"] is not None]
        stuck = len(rows) - len(unblocked)
        cell = (
            f"{statistics.median(unblocked):.1f}"
            if not stuck
            else f"never: still waiting after {report['give_up_s']:.0f} s ({stuck} of {len(rows)})"
        )
        exits = statistics.median(r["exit_s"] for r in rows)
        waited = sum(1 for r in rows if r["waited"])
        lines.append(f"| {name} | {len(rows)} | {cell} | {exits:.1f} | {waited} of {len(rows)} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
