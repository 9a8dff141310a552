"""The embedding stage against an embedding server: concurrent requests vs one at a time, and its ceiling.

A fake OpenAI-compatible server on loopback (tests/fake_embedding_server.py, a real HTTP server in
a process of its own) answers after a fixed latency, as a GPU box or a hosted API would; the
real `stage_embeddings` stages the same chunks on a fresh embedded Postgres, once per
`concurrency`, each with an empty cache (a model name per run). Then the same with an instant
server: what the stage itself sustains (tokenizing, JSON, the cache writes), with the fake
server's own work on the same 2 cores.

    python -m benchmarks.bench_endpoint [--chunks 5000] [--latency 0.1] [--concurrency 1 2 4 8]

Results: benchmarks/results/endpoint.md (and .json).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chunkyard.chunking.types import Document
from chunkyard.retrieval.embedders.endpoint_backend import EndpointEmbedder
from chunkyard.retrieval.embedders.endpoint_settings import EndpointSettings
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
WORDS_PER_CHUNK = 100


def corpus(chunks: int, seed: int = 7) -> list[Document]:
    """Documents of random words, `chunks` windows of WORDS_PER_CHUNK words in all (20 per document)."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9))) for _ in range(5000)]
    per_doc = 20
    return [
        Document(f"d{i:05d}.md", " ".join(rng.choice(vocabulary) for _ in range(per_doc * WORDS_PER_CHUNK)))
        for i in range(-(-chunks // per_doc))
    ]


def fake_server(latency: float, model: str, port: int = 0) -> tuple[subprocess.Popen, str]:
    """The fake server in a process of its own (its JSON work does not share this process's GIL), on
    `port` (0: any free one)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_embedding_server", "--dim", "384", "--model", model]
        + ["--delay", str(latency), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def one_run(store: Store, docs: list[Document], latency: float, concurrency: int, tag: str) -> dict[str, Any]:
    """Stage chunks, then time `stage_embeddings` against a fresh server of `latency` (empty cache)."""
    server, url = fake_server(latency, f"bench-{tag}")
    try:
        options = {"backend": "openai", "url": url, "model": f"bench-{tag}", "concurrency": concurrency}
        config = IndexConfig(
            name=f"bench-{tag}",
            chunker={"strategy": "token", "size": WORDS_PER_CHUNK, "overlap": 0, "tokenizer": "words"},
            bm25={"analyzer": "standard"},
            embedder=options,
        )
        spec = IndexSpec(f"endpoint{tag}", config)
        store.documents.sync(spec.collection, docs, [])
        stage_chunks(store, spec)
        embedder = EndpointEmbedder(config.embedding_model, EndpointSettings.from_options(options))
        started = time.perf_counter()
        report = stage_embeddings(store, spec, embedder)
        seconds = time.perf_counter() - started
        usage = embedder.usage
    finally:
        server.terminate()
        server.wait()
    return {
        "latency_s": latency,
        "concurrency": concurrency,
        "chunks": report.chunks,
        "embedded": report.embeddings_computed,
        "requests": usage.requests,
        "seconds": round(seconds, 2),
        "chunks_per_second": round(report.embeddings_computed / seconds, 1),
        "embed_seconds": report.embed_seconds,
        "cache_write_wait_seconds": report.cache_write_wait_seconds,
        "stage_write_seconds": report.stage_write_seconds,
    }


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    docs = corpus(args.chunks)
    load_before = uptime()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-endpoint-") as tmp:
        store = Store(embedded_database_url(Path(tmp) / "pg"))
        store.migrate()
        for c in args.concurrency:
            runs.append(one_run(store, docs, args.latency, c, f"l{c}"))
            print(json.dumps(runs[-1]), flush=True)
        runs.append(one_run(store, docs, 0.0, 4, "instant"))
        print(json.dumps(runs[-1]), flush=True)
        store.close()
    result = {
        "machine": platform.platform(),
        "load_before": load_before,
        "load_after": uptime(),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "endpoint.json").write_text(json.dumps(result, indent=2) + "\n")
    base = runs[0]["seconds"]
    lines = [
        "# The embedding stage against an embedding server",
        "",
        f"`python -m benchmarks.bench_endpoint --chunks {args.chunks} --latency {args.latency}`: the real "
        "`stage_embeddings` on a fresh embedded Postgres, against the fake OpenAI-compatible server of "
        "tests/fake_embedding_server.py in its own process on loopback (384 dimensions, 32 texts per request, "
        "an empty cache per run). One run, side by side.",
        f"Load before: `{load_before}`; after: `{result['load_after']}`.",
        "",
        "| server latency | concurrency | chunks | requests | seconds | chunks/s | speed-up | waiting for answers s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        speed_up = f"{base / run['seconds']:.2f}x" if run["latency_s"] == args.latency else "–"
        lines.append(
            f"| {run['latency_s'] * 1000:.0f} ms | {run['concurrency']} | {run['embedded']:,} | {run['requests']} "
            f"| {run['seconds']:.2f} | {run['chunks_per_second']:,.0f} | {speed_up} | {run['embed_seconds']:.2f} |"
        )
    (RESULTS / "endpoint.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
