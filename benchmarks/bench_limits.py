"""Slow clients and overload, before and after the server limits: connections held, latency and refusals.

    python -m benchmarks.bench_limits [--before-repo ../before --before-python ../before/.venv/bin/python]
        [--levels 20 50 200] [--seconds 20] [--slow 300] [--short-body 50] [--hold 75]

Builds `loadtest/recursive-256` from docs/ (as bench_load does) on an embedded Postgres of its own,
then for each variant ("before": the service of another checkout, e.g. main's, run by its own
Python; "after": this checkout's) starts the service as `chunkyard serve` runs it (its own
process, warm, on loopback), all at once, and measures in one sitting:

- slow clients: `--slow` connections that send a request line and then one header byte every
  10 s, and `--short-body` connections that send a body shorter than their Content-Length; after
  `--hold` seconds (the 60 s header and body timeouts and a margin), how many are still open, when
  the others were closed, and the service's open file descriptors;
- overload: for each of `--levels` concurrent clients, on each variant right after the other,
  `--seconds` of hybrid searches back to back
  (a client answered 503 waits the Retry-After it was given, as a well-behaved client does): req/s,
  latency percentiles of the answered searches, refusals (503) and how fast they came, errors.

Writes the tables into benchmarks/results/load.md (the section from LIMITS_HEADING on).
"""

from __future__ import annotations

import argparse
import os
import platform
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from chunkyard.retrieval.embedders.embedder import shared_embedder
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.settings.names import DEFAULT_CONFIG
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url, stop_embedded_servers

from benchmarks.bench_load import QUERIES, percentile, publish
from tests import service_process
from tests.service_process import stop_service

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "load.md"
LIMITS_HEADING = "## Slow clients and overload (issue 41)"
INDEX = "loadtest/recursive-256"


def start_service(python: str, repo: Path, pg_data: Path) -> tuple[str, subprocess.Popen]:
    """The checkout `repo`'s service on the shared embedded Postgres in `pg_data`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHUNKYARD_") and k != "PYTHONPATH"}
    return service_process.start_service(
        "--pg-data", str(pg_data), python=python, root=repo, env=env, ready_timeout=600
    )


def slow_clients(base: str, pid: int, slow: int, short: int, hold_s: float) -> dict:
    """Open the slow connections, trickle, and see which the server closes within `hold_s`."""
    host, port = base.removeprefix("http://").split(":")
    opened: dict[socket.socket, str] = {}
    for n in range(slow + short):
        sock = socket.create_connection((host, int(port)), timeout=10)
        if n < slow:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            opened[sock] = "header"
        else:
            sock.sendall(
                b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n" + b'{"query": '
            )
            opened[sock] = "body"
        sock.setblocking(False)
    started = time.monotonic()
    closed_at: dict[socket.socket, float] = {}
    answers: dict[str, int] = {}
    last_trickle = started
    fds_peak = 0
    while time.monotonic() - started < hold_s:
        live = [s for s in opened if s not in closed_at]
        readable = select.select(live, [], [], 1.0)[0] if live else []
        for sock in readable:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if data:
                status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "other"
                answers[status] = answers.get(status, 0) + 1
                continue
            closed_at[sock] = time.monotonic() - started
        if time.monotonic() - last_trickle >= 10:
            last_trickle = time.monotonic()
            for sock in [s for s, kind in opened.items() if kind == "header" and s not in closed_at]:
                try:
                    sock.send(b"X")
                except OSError:
                    closed_at[sock] = time.monotonic() - started
        fds_peak = max(fds_peak, len(os.listdir(f"/proc/{pid}/fd")))
    fds_end = len(os.listdir(f"/proc/{pid}/fd"))
    still = {
        kind: sum(1 for s, k in opened.items() if k == kind and s not in closed_at)
        for kind in ("header", "body")
    }
    closes = sorted(closed_at.values())
    for sock in opened:
        sock.close()
    return {
        "slow": slow,
        "short": short,
        "hold_s": hold_s,
        "open_header": still["header"],
        "open_body": still["body"],
        "closed_median_s": statistics.median(closes) if closes else None,
        "answers": answers,
        "fds_peak": fds_peak,
        "fds_end": fds_end,
    }


def overload(base: str, clients: int, seconds: float) -> dict:
    answered: list[float] = []
    refused: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(base_url=base, timeout=30) as http:
            i = n
            while not stop.is_set():
                body = {"query": QUERIES[i % len(QUERIES)], "index": INDEX, "mode": "hybrid"}
                i += 1
                started = time.perf_counter()
                try:
                    response = http.post("/v1/search", json=body)
                except httpx.HTTPError as exc:
                    with lock:
                        errors.append(type(exc).__name__)
                    continue
                elapsed = time.perf_counter() - started
                if response.status_code == 503 and "retry-after" in response.headers:
                    with lock:
                        refused.append(elapsed)
                    stop.wait(min(float(response.headers["retry-after"]), 5))
                    continue
                with lock:
                    if response.status_code == 200:
                        answered.append(elapsed)
                    else:
                        errors.append(str(response.status_code))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    return {
        "clients": clients,
        "answered": len(answered),
        "rps": len(answered) / wall,
        "p50": percentile(answered, 0.50) * 1000,
        "p95": percentile(answered, 0.95) * 1000,
        "max": max(answered) * 1000 if answered else float("nan"),
        "refused": len(refused),
        "refused_p50": percentile(refused, 0.50) * 1000 if refused else None,
        "refused_p95": percentile(refused, 0.95) * 1000 if refused else None,
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-repo", type=Path, help="the checkout whose service is 'before'")
    parser.add_argument("--before-python", default=sys.executable)
    parser.add_argument("--levels", type=int, nargs="+", default=[20, 50, 200])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--slow", type=int, default=300)
    parser.add_argument("--short-body", type=int, default=50)
    parser.add_argument("--hold", type=float, default=75)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="chunkyard-limits-"))
    store = Store(embedded_database_url(folder / "pg"))
    store.migrate()
    config = IndexConfig(name=DEFAULT_CONFIG, chunker={"strategy": "recursive", "size": 256, "overlap": 0})
    build_s = publish(store, IndexSpec("loadtest", config), shared_embedder(), 1)
    print(f"built {INDEX} in {build_s:.1f} s", flush=True)
    variants = [("after", sys.executable, REPO)]
    if args.before_repo:
        variants.insert(0, ("before", args.before_python, args.before_repo.resolve()))
    load_before = os.getloadavg()
    results: dict[str, dict] = {name: {"rows": []} for name, _, _ in variants}
    running: dict[str, tuple[str, subprocess.Popen]] = {}
    try:
        for name, python, repo in variants:  # both up at once: each level runs on both back to back
            running[name] = start_service(python, repo, folder / "pg")
        print("slow clients against every variant at once ...", flush=True)

        def hold(name: str) -> None:
            base, process = running[name]
            results[name]["slow"] = slow_clients(base, process.pid, args.slow, args.short_body, args.hold)

        holders = [threading.Thread(target=hold, args=(name,)) for name in running]
        for thread in holders:
            thread.start()
        for thread in holders:
            thread.join()
        for name in running:
            print(f"  {name}: {results[name]['slow']}", flush=True)
        for clients in args.levels:
            for name, (base, _) in running.items():
                print(f"{name}: {clients} concurrent searches for {args.seconds:.0f} s ...", flush=True)
                results[name]["rows"].append(overload(base, clients, args.seconds))
                print(f"  {results[name]['rows'][-1]}", flush=True)
                time.sleep(3)  # let the last searches drain before the next variant
    finally:
        for _, process in running.values():
            stop_service(process)
        store.close()
        stop_embedded_servers()  # the services were its other users; the last one out stops it
    load_after = os.getloadavg()
    write(args.output, results, args, load_before, load_after)


def write(path: Path, results: dict[str, dict], args: argparse.Namespace, before, after) -> None:
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    lines = [
        LIMITS_HEADING,
        "",
        "`make bench-limits` (benchmarks/bench_limits.py): the service as `chunkyard serve` runs it, warm, on "
        f"loopback, index `{INDEX}` from docs/; **before** = the service of "
        f"`{args.before_repo or '-'}` (main, uvicorn's defaults), **after** = this checkout's (header and body "
        "timeouts 60 s, keep-alive 5 s, at most 1000 connections; admission control: 2 searches per CPU at "
        "once, stated latency 2 s), both running in one sitting, each level measured on one right after the other.",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}; clients and service share them. "
        f"Load average (uptime) before: {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
        f"after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} (other work on the machine counts too).",
        "",
        f"### Slow clients: {args.slow} connections sending one header byte every 10 s, {args.short_body} "
        f"with a body shorter than its Content-Length, {args.hold:.0f} s later",
        "",
        "| variant | still open (header) | still open (body) | closed after, median s | answers sent "
        "| service fds peak / end |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, result in results.items():
        slow = result["slow"]
        answers = ", ".join(f"{count} x {code}" for code, count in sorted(slow["answers"].items())) or "none"
        lines.append(
            f"| {name} | {slow['open_header']} of {slow['slow']} | {slow['open_body']} of {slow['short']} "
            f"| {fmt(slow['closed_median_s'])} | {answers} | {slow['fds_peak']} / {slow['fds_end']} |"
        )
    lines += [
        "",
        f"### Concurrent hybrid searches, {args.seconds:.0f} s per level",
        "",
        "A refused search got 503 with Retry-After and its client waited that long before its next one. "
        "Latencies are of the answered (200) searches; 'refused p50 / p95' is how long a refusal took to "
        "arrive at the client (the client's own 200 threads and the machine's load included).",
        "",
        "| clients | variant | answered | req/s | p50 ms | p95 ms | max ms | refused (503) "
        "| refused p50 / p95 ms | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for position, clients in enumerate(args.levels):
        for name, result in results.items():
            r = result["rows"][position]
            errors = f"{r['errors']} {r['error_kinds']}" if r["errors"] else "0"
            lines.append(
                f"| {clients} | {name} | {r['answered']} | {r['rps']:.1f} | {r['p50']:.0f} | {r['p95']:.0f} "
                f"| {r['max']:.0f} | {r['refused']} | {fmt(r.get('refused_p50'))} / {fmt(r['refused_p95'])} "
                f"| {errors} |"
            )
    lines.append("")
    kept = path.read_text() if path.exists() else ""
    kept = kept.split(LIMITS_HEADING)[0].rstrip() + "\n\n" if kept else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kept + "\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
