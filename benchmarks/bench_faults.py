"""Time to convergence after each fault: the stack fault suite (tests/test_faults.py), timed.

Runs `pytest -m faults tests/test_faults.py` with CHUNKYARD_FAULTS_RESULTS set, so the suite writes
each case's seconds (fault -> the edit searchable and no index behind, and edit -> the same), then
renders them as benchmarks/results/faults.md. `--render` re-renders the last JSON without running.

    python -m benchmarks.bench_faults [--render] [--ports 43400]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_not_started import section

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Faults: time until the stack has converged again",
        "",
        f"`make bench-faults` (`python -m benchmarks.bench_faults`, the cases of `make test-faults`), measured "
        f"{report['measured']} on {report['machine']}. Load (`uptime`) before: `{report['load_before']}`; "
        f"after: `{report['load_after']}`. The machine's 2 cores were shared with other work.",
        "",
        "One `chunkyard stack up` (Postgres, `chunkyard instance`, the code server, the Dagster webserver and "
        "daemon, the query service) on a two-document collection (a 256-token chunker, so the edited document is one chunk; the bundled ONNX model; no evaluation set), "
        "sensor interval 1 s. Each case appends a unique word to a document, injects the fault while that "
        "edit's run is starting or running, and then, with no further edit, waits until the word is "
        "searchable (`POST /v1/search`, BM25) and no document is stale (`/v1/indexes` lag 0 for every "
        "index, and `documents` holds the folder's hashes). The cases run in this order on one stack's "
        "history; failed runs are counted over the whole history so far.",
        "",
        "| case | fault -> converged (s) | edit -> converged (s) | failed runs so far |",
        "|---|---|---|---|",
    ]
    for case in report["cases"]:
        lines.append(
            f"| {case['case']} | {case['after_fault_s']:.1f} | {case['after_edit_s']:.1f} | {case['failed_runs']} |"
        )
    lines += ["", *report.get("notes", []), ""]
    killed_cli = RESULTS / "faults_not_started.json"  # benchmarks.bench_not_started
    if killed_cli.exists():
        lines += [*section(json.loads(killed_cli.read_text(encoding="utf-8"))), "", *NOT_STARTED_NOTES, ""]
    return "\n".join(lines)


NOTES = [
    "## Reading",
    "",
    "- **kill -9 of the run process** (its pid from the run's RUN_START event): the dead-run sweep of the "
    "next sensor tick fails the run, and the reconciler requests a run for the gap at once (first "
    "attempt, no backoff).",
    "- **kill -9 of dagster-daemon** (as soon as the edit's run is STARTING): a run already handed to the "
    "code server is its child (the `code-server` service) and finishes while the supervisor restarts the "
    "daemon; one the daemon was still launching never gets a process, and the sweep fails it once no "
    "worker has reported a pid 60 s after the launch (`assets.runs.LAUNCH_GRACE_SECONDS`; before, it "
    "stayed STARTING until run monitoring's 180 s start timeout plus its 120 s poll). Here the kill "
    "came mid-launch: one failed run, then the reconciler's run.",
    "- **Postgres fast stop** (SIGINT to the postmaster): the supervisor starts it again after its 1 s "
    "backoff; a run with a statement in flight fails on its connection and the reconciler retries the gap "
    "(in the run above the run got through: no failed run).",
    "- **`stack down` during a run, then `stack up`** and **SIGHUP to the supervisor** (it stops the "
    "stack cleanly: no process is left, Postgres gets a fast shutdown), then `stack up`: the time "
    "includes the new stack's start. `chunkyard instance` fails the runs the stopped stack left "
    "STARTING or STARTED (none of its processes is left), so the reconciler retries at once instead of "
    "after run monitoring's 180 s start timeout.",
    "- **kill -9 of the query service**, with a second edit while it is down: the supervisor restarts "
    "only the query service; the daemon keeps indexing (the test checks its pid is unchanged).",
]


NOT_STARTED_NOTES = [
    "Reading: the killed command's run carries its creator (`chunkyard/creator`: pid and process start "
    "time, `assets.runs.creator_tags`). The next command's judge (`assets.runs.collections_in_flight`) "
    "finds that process gone and fails the run before it looks for runs in flight, so it does not wait at "
    "all; the time above is the command's own start-up and its indexing run. Before, the in-flight set "
    "counted the NOT_STARTED run and the dead-run sweep never judged that state: the next command waited "
    "with no end, and `--no-wait` refused.",
    "",
    'Worst case to unblock, by who created the run (docs/deployment.md, "Who may write an index"): a '
    "`chunkyard index` on this host, at once (the next command or the janitor's next tick, 30 s); any "
    "other NOT_STARTED run (a daemon that died between creating and queueing it, a command on another "
    "host), run monitoring's start timeout, 180 s after its creation, plus one poll: 2 s in a waiting "
    "`chunkyard index`, 10 s in the daemon's run monitoring.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "faults.md")
    parser.add_argument("--render", action="store_true", help="re-render the last JSON only")
    parser.add_argument("--ports", type=int, help="first of four consecutive ports (default: free ones)")
    args = parser.parse_args(argv)
    data = args.out.with_suffix(".json")
    if not args.render:
        env = {**os.environ, "CHUNKYARD_FAULTS_RESULTS": str(data)}
        if args.ports:
            env["CHUNKYARD_FAULTS_PORTS"] = str(args.ports)
        command = [sys.executable, "-m", "pytest", "-q", "-m", "faults", "tests/test_faults.py"]
        done = subprocess.run(command, cwd=REPO_ROOT, env=env)
        if done.returncode != 0:
            print("the fault suite failed: no results written", file=sys.stderr)
            return done.returncode
        report = json.loads(data.read_text(encoding="utf-8"))
        report["measured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        report["machine"] = (
            f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}"
        )
        report["notes"] = NOTES
        data.write_text(json.dumps(report, indent=2), encoding="utf-8")
    report = json.loads(data.read_text(encoding="utf-8"))
    from benchmarks.bench_symlink_race import race_section  # its own runs (symlink_race.json)

    args.out.write_text(markdown(report) + race_section(), encoding="utf-8")
    print(f"wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
