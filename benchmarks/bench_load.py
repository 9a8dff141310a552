"""Load benchmark: concurrent hybrid queries against a real service process, with a publish in the middle.

    python -m benchmarks.bench_load [--clients 8 32] [--seconds 60]

Builds `loadtest/recursive-256` from docs/ of this repository on an embedded Postgres of its own
(a temporary folder), starts the service as `chunkyard serve` runs it (its own uvicorn process,
warm) on loopback, then for each client count runs that many clients for `--seconds`, each sending
hybrid queries back to back. Halfway through each run the collection is re-indexed and published
(a new version). Reports req/s, latency percentiles, errors, mixed-version answers (a response whose
results carry more than one index_version) and the service's RSS, to benchmarks/results/load.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.embedder import shared_embedder
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.settings.names import DEFAULT_CONFIG
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url

from tests.service_process import rss_kib, service

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "load.md"
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
    "context scoring neighbours weight",
    "what does a recursive chunker split on",
]


def documents(generation: int) -> list[Document]:
    """docs/*.md, with a generation line so each publish changes every document."""
    return [
        Document(path.name, f"{path.read_text()}\n\nGeneration {generation} of the load benchmark.\n")
        for path in sorted((REPO / "docs").glob("*.md"))
    ]


def publish(store: Store, spec: IndexSpec, embedder, generation: int) -> float:
    started = time.perf_counter()
    store.documents.sync(spec.collection, documents(generation), [])
    build_index(store, spec, embedder)
    return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def run(base: str, pid: int, clients: int, seconds: float, on_half: callable) -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    mixed = 0
    versions: set[int] = set()
    rss: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        nonlocal mixed
        with httpx.Client(base_url=base, timeout=30) as http:
            i = n
            while not stop.is_set():
                body = {
                    "query": QUERIES[i % len(QUERIES)],
                    "index": "loadtest/recursive-256",
                    "mode": "hybrid",
                }
                i += 1
                started = time.perf_counter()
                try:
                    response = http.post("/v1/search", json=body)
                except httpx.HTTPError as exc:
                    with lock:
                        errors.append(type(exc).__name__)
                    continue
                elapsed = time.perf_counter() - started
                with lock:
                    if response.status_code != 200:
                        errors.append(str(response.status_code))
                        continue
                    latencies.append(elapsed)
                    seen = {r["index_version"] for r in response.json()["results"]}
                    versions.update(seen)
                    mixed += len(seen) > 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    published = None
    while time.monotonic() - started < seconds:
        rss.append(rss_kib(pid))
        if published is None and time.monotonic() - started >= seconds / 2:
            published = on_half()
        time.sleep(1)
    stop.set()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    return {
        "clients": clients,
        "requests": len(latencies),
        "rps": len(latencies) / wall,
        "p50": percentile(latencies, 0.50) * 1000,
        "p95": percentile(latencies, 0.95) * 1000,
        "p99": percentile(latencies, 0.99) * 1000,
        "mean": statistics.fmean(latencies) * 1000 if latencies else float("nan"),
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "mixed": mixed,
        "versions": sorted(versions),
        "rss_start": rss[0] / 1024,
        "rss_peak": max(rss) / 1024,
        "rss_end": rss[-1] / 1024,
        "publish_s": published,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="chunkyard-load-"))
    store = Store(embedded_database_url(folder / "pg"))
    store.migrate()
    config = IndexConfig(name=DEFAULT_CONFIG, chunker={"strategy": "recursive", "size": 256, "overlap": 0})
    spec = IndexSpec("loadtest", config)
    embedder = shared_embedder()
    generation = [1]
    first_build = publish(store, spec, embedder, 1)
    print(f"built {spec.name} from docs/ in {first_build:.1f} s")

    def republish() -> float:
        generation[0] += 1
        seconds = publish(store, spec, embedder, generation[0])
        print(f"  published generation {generation[0]} in {seconds:.1f} s")
        return seconds

    load_before = os.getloadavg()
    rows = []
    with service("--pg-data", str(folder / "pg"), ready_timeout=300) as (base, process):
        chunks = httpx.get(f"{base}/v1/indexes").json()
        count = next(i["chunk_count"] for i in chunks if i["name"] == spec.name)
        for clients in args.clients:
            print(f"{clients} clients for {args.seconds:.0f} s ...")
            rows.append(run(base, process.pid, clients, args.seconds, republish))
            print(f"  {rows[-1]}")
    load_after = os.getloadavg()
    write(args.output, rows, count, args.seconds, load_before, load_after, first_build)


def write(path: Path, rows: list[dict], chunks: int, seconds: float, before, after, build_s: float) -> None:
    lines = [
        "# Load: concurrent hybrid queries with a publish in the middle",
        "",
        f"`make bench-load` (benchmarks/bench_load.py). Service: its own uvicorn process, warm, as "
        f"`chunkyard serve` runs it, on loopback; index `loadtest/recursive-256` built from docs/ "
        f"({chunks} chunks, first build {build_s:.0f} s); each client sends hybrid queries back to back "
        f"for {seconds:.0f} s; halfway through, the collection is re-indexed and published (a new version).",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}; clients and service share them. "
        f"Load average (uptime) before: {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
        f"after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} (other work on the machine counts too).",
        "",
        "| clients | requests | req/s | p50 ms | p95 ms | p99 ms | errors | mixed-version answers "
        "| versions seen | publish s | RSS start / peak / end MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['clients']} | {r['requests']} | {r['rps']:.1f} | {r['p50']:.0f} | {r['p95']:.0f} "
            f"| {r['p99']:.0f} | {r['errors']}{' ' + str(r['error_kinds']) if r['errors'] else ''} "
            f"| {r['mixed']} | {', '.join(map(str, r['versions']))} | {r['publish_s'] or 0:.1f} "
            f"| {r['rss_start']:.0f} / {r['rss_peak']:.0f} / {r['rss_end']:.0f} |"
        )
    lines += [
        "",
        "A mixed-version answer would be one response whose results carry different `index_version`s; "
        "every query reads inside one read transaction, so there should be none. Errors count non-200 answers "
        "and client-side failures.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    limits = "## Slow clients and overload"  # bench_limits' section, kept
    kept = path.read_text().partition(limits) if path.exists() else ("", "", "")
    path.write_text("\n".join(lines) + (f"\n{limits}{kept[2]}" if kept[1] else ""))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
