"""What keys, rate limits and metrics cost a search: p95 with them on vs a service without them, side by side.

    python -m benchmarks.bench_team [--baseline-root DIR] [--requests 300] [--rounds 3]

Builds `demo/recursive-256` (the demo collection, docs/*.md, with its configured index config) on an
embedded Postgres of its own, then runs two service processes on it, each as `chunkyard serve` runs it
(uvicorn, warm):

- **off**: the code in `--baseline-root` (a checkout from before keys, limits and metrics, with its own
  `.venv`), without an API key: today's service. Without `--baseline-root`, this code without a key
  (open: no key lookup, no limits; the metrics middleware still counts).
- **on**: this code with CHUNKYARD_API_KEY set, searched with a stored `search` key scoped to `demo`
  (looked up, cached 0.5 s, rate-limited: its rate is set high enough never to refuse, so the limiter
  runs on every request), `/metrics` scraped every 50 searches as a Prometheus would.

One client alternates its requests between the two (off, on, off, on, ...), so both see the same
machine load; hybrid queries. Per round: each side's p50 and p95; the result is the median over rounds
and the ratio on/off. Writes benchmarks/results/team.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.key_admin import create_key
from chunkyard.retrieval.embedders.embedder import embedder_for_config
from chunkyard.retrieval.settings.config_checks import load_index_specs
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url

from tests.service_process import start_service, stop_service

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "team.md"
INDEX = "demo/recursive-256"
BOOTSTRAP = "bench-team-bootstrap"
QUERIES = [
    "how do I index my own documents",
    "what does the hybrid mode fuse",
    "reciprocal rank fusion constant",
    "where does the embedded Postgres keep its data",
    "how are chunk spans checked",
    "which metrics does the evaluation report",
    "what is the coarse fallback",
    "how to run the query service",
    "BM25 analyzer for other languages",
    "HNSW ef_search for a million chunks",
]


def build_demo(store: Store) -> int:
    spec = next(s for s in load_index_specs() if str(s.name) == INDEX)
    docs = [Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((REPO / "docs").glob("*.md"))]
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder_for_config(spec.config.as_dict()))
    return int(store.indexes.info(INDEX)["chunk_count"])


def start(python: str, root: Path, url: str, api_key: str | None) -> tuple[str, subprocess.Popen]:
    """The checkout `root`'s service on `url`, requiring `api_key` where one is given."""
    env = {k: v for k, v in os.environ.items() if k not in ("CHUNKYARD_API_KEY", "VIRTUAL_ENV")}
    return start_service(
        "--database-url",
        url,
        *(["--api-key", api_key] if api_key else []),
        python=python,
        root=root,
        env=env,
        ready_timeout=600,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-root", type=Path, help="a checkout of the code before (with .venv/)")
    parser.add_argument("--requests", type=int, default=300, help="searches per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="chunkyard-team-"))
    url = embedded_database_url(folder / "pg")
    store = Store(url)
    store.migrate()
    started = time.perf_counter()
    chunks = build_demo(store)
    print(f"built {INDEX} ({chunks} chunks) in {time.perf_counter() - started:.0f} s", flush=True)
    _, token = create_key(store, "bench-app", "search", ["demo"], actor="bench", rate_per_s=100_000)

    baseline = args.baseline_root.resolve() if args.baseline_root else REPO
    off_python = str(baseline / ".venv" / "bin" / "python") if args.baseline_root else sys.executable
    off_base, off_process = start(off_python, baseline, url, None)
    on_base, on_process = start(sys.executable, REPO, url, BOOTSTRAP)
    load_before = os.getloadavg()
    rounds: list[dict[str, float]] = []
    pooled: dict[str, list[float]] = {"off": [], "on": []}
    try:
        with (
            httpx.Client(base_url=off_base, timeout=60) as off,
            httpx.Client(base_url=on_base, timeout=60) as on,
        ):
            headers = {"X-API-Key": token}
            for client, sent in ((off, {}), (on, headers)):  # both have answered every query once
                for query in QUERIES:
                    client.post(
                        "/v1/search", json={"query": query, "index": INDEX, "mode": "hybrid"}, headers=sent
                    )
            for number in range(args.rounds):
                times: dict[str, list[float]] = {"off": [], "on": []}
                for i in range(args.requests):
                    body = {"query": QUERIES[i % len(QUERIES)], "index": INDEX, "mode": "hybrid"}
                    for name, client, sent in (("off", off, {}), ("on", on, headers))[:: 1 if i % 2 else -1]:
                        begun = time.perf_counter()
                        response = client.post("/v1/search", json=body, headers=sent)
                        times[name].append(time.perf_counter() - begun)
                        assert response.status_code == 200, (name, response.status_code, response.text)
                    if i % 50 == 49:
                        scraped = on.get("/metrics", headers={"X-API-Key": BOOTSTRAP})
                        assert scraped.status_code == 200, scraped.text
                row = {
                    f"{name}_{q}": percentile(values, q) * 1000
                    for name, values in times.items()
                    for q in (0.5, 0.95)
                }
                rounds.append(row)
                for name, values in times.items():
                    pooled[name] += values
                print(f"round {number + 1}: {row}", flush=True)
    finally:
        for process in (off_process, on_process):
            stop_service(process)
    load_after = os.getloadavg()
    every = {
        f"{name}_{q}": percentile(values, q) * 1000 for name, values in pooled.items() for q in (0.5, 0.95)
    }
    write(args.output, rounds, every, chunks, args, load_before, load_after, bool(args.baseline_root))


def write(
    path: Path, rounds: list[dict], every: dict, chunks: int, args, before, after, main_baseline: bool
) -> None:
    ratio95 = every["on_0.95"] / every["off_0.95"]
    ratio50 = every["on_0.5"] / every["off_0.5"]
    round_ratio = statistics.median(r["on_0.95"] / r["off_0.95"] for r in rounds)
    baseline = (
        "the code before this change (a checkout of `main` at the branch point, its own venv), no API key"
        if main_baseline
        else "this code without an API key (no key lookup, no limits)"
    )
    lines = [
        "# Team serving: what keys, rate limits and metrics cost a search",
        "",
        "`make bench-team` (benchmarks/bench_team.py). Two service processes side by side on one embedded "
        f"Postgres, each warm as `chunkyard serve` runs it, serving `{INDEX}` built from docs/ ({chunks} chunks, "
        "the demo collection's configured index config). One client alternates hybrid searches between them "
        f"(off, on, on, off, ...), {args.requests} per side per round, {args.rounds} rounds.",
        "",
        f"- **off**: {baseline}.",
        "- **on**: this branch with `CHUNKYARD_API_KEY` set; searched with a stored `search` key scoped to `demo` "
        "(hash lookup cached 0.5 s, scope check, token-bucket rate limit and concurrent-search slot on every "
        "request), the metrics middleware and stage histograms, `/metrics` scraped every 50 searches.",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}, shared with other work. "
        f"Load average (uptime) before: {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
        f"after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}.",
        "",
        "| round | off p50 ms | on p50 ms | off p95 ms | on p95 ms | p95 on/off |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n, r in enumerate(rounds, 1):
        lines.append(
            f"| {n} | {r['off_0.5']:.1f} | {r['on_0.5']:.1f} | {r['off_0.95']:.1f} | {r['on_0.95']:.1f} "
            f"| {r['on_0.95'] / r['off_0.95']:.2f}x |"
        )
    lines += [
        f"| **all rounds** | {every['off_0.5']:.1f} | {every['on_0.5']:.1f} | {every['off_0.95']:.1f} "
        f"| {every['on_0.95']:.1f} | **{ratio95:.2f}x** |",
        "",
        f"Search p95 over every round's searches with keys, limits and metrics on is **{ratio95:.2f}x** the "
        f"service without them (p50 {ratio50:.2f}x; the median of the rounds' p95 ratios {round_ratio:.2f}x); "
        "the goal is at most 1.1x. Latencies are client-side, over loopback; on a machine this loaded the "
        "rounds' own spread (the off column) is the noise to read the ratio against.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
