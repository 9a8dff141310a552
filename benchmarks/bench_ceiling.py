"""The pipeline's own ceiling: chunks/s of each indexing phase with an embedding server that answers at once.

bench_endpoint's corpus (random words, 100-word token windows) at each size, on a fresh embedded
Postgres; the embedder is the fake OpenAI-compatible server (tests/fake_embedding_server.py, its own
process on loopback, no latency, 384 dimensions), so what is measured is chunkyard: syncing the
documents, `stage_chunks`, `stage_embeddings` (tokenizing, requests, JSON, the cache writes),
`stage_bm25` and `publish` (HNSW build included), each timed on its own, one size after the other.

    python -m benchmarks.bench_ceiling [--chunks 10000 100000]

Results: the `ceiling` section of benchmarks/results/scale.md (and .json).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from chunkyard.retrieval.embedders.endpoint_backend import EndpointEmbedder
from chunkyard.retrieval.embedders.endpoint_settings import EndpointSettings
from chunkyard.retrieval.indexing.bm25 import stage_bm25
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.indexing.publish import publish
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url, stop_embedded_servers

from benchmarks.bench_endpoint import WORDS_PER_CHUNK, corpus, fake_server, uptime
from benchmarks.scale_report import RESULTS, save_section

PHASES = ("sync_documents", "stage_chunks", "stage_embeddings", "stage_bm25", "publish")


def one_size(store: Store, chunks: int) -> dict[str, Any]:
    """Every phase of a first build of `chunks` chunks, timed one by one (empty cache: a model per size)."""
    model = f"ceiling-{chunks}"
    server, url = fake_server(0.0, model)
    try:
        options = {"backend": "openai", "url": url, "model": model}
        config = IndexConfig(
            name=model,
            chunker={"strategy": "token", "size": WORDS_PER_CHUNK, "overlap": 0, "tokenizer": "words"},
            bm25={"analyzer": "standard"},
            embedder=options,
        )
        spec = IndexSpec(f"ceiling{chunks}", config)
        docs = corpus(chunks)
        embedder = EndpointEmbedder(config.embedding_model, EndpointSettings.from_options(options))
        load_before = uptime()
        seconds: dict[str, float] = {}
        steps = [
            ("sync_documents", lambda: store.documents.sync(spec.collection, docs, [])),
            ("stage_chunks", lambda: stage_chunks(store, spec)),
            ("stage_embeddings", lambda: stage_embeddings(store, spec, embedder)),
            ("stage_bm25", lambda: stage_bm25(store, spec)),
            ("publish", lambda: publish(store, spec)),
        ]
        results: dict[str, Any] = {}
        for name, step in steps:
            started = time.perf_counter()
            results[name] = step()
            seconds[name] = round(time.perf_counter() - started, 2)
            print(f"  {chunks} chunks: {name} {seconds[name]} s ({uptime()})", flush=True)
        load_after = uptime()
    finally:
        server.terminate()
        server.wait()
    published = results["publish"]
    made = results["stage_chunks"].chunks_staged
    total = sum(seconds.values())
    return {
        "chunks": made,
        "seconds": seconds,
        "total_seconds": round(total, 2),
        "chunks_per_second": {k: round(made / max(v, 1e-9), 1) for k, v in seconds.items()},
        "overall_chunks_per_second": round(made / total, 1),
        "detail": {  # where each phase's time went, from the stages' own reports
            "stage_chunks": _pick(results["stage_chunks"], "load_seconds", "chunk_seconds"),
            "stage_embeddings": _pick(
                results["stage_embeddings"],
                "embed_seconds",
                "cache_lookup_seconds",
                "cache_write_wait_seconds",
                "stage_write_seconds",
            ),
            "stage_bm25": _pick(results["stage_bm25"], "postings_keys_seconds"),
            "publish": _pick(published, "hnsw_seconds"),
        },
        "load_before": load_before,
        "load_after": load_after,
    }


def _pick(report: Any, *names: str) -> dict[str, float]:
    return {name: getattr(report, name) for name in names}


def markdown_ceiling(report: dict[str, Any]) -> str:
    lines = [
        "## The pipeline's ceiling with an instant embedding server",
        "",
        "bench_endpoint's corpus (random words, one 100-word token window per chunk), a first build per size on "
        f"one fresh embedded {report['server']}; the embedder is the fake server in its own process, answering "
        "at once (384 dimensions, 32 texts per request, 4 in flight), on the same 2 shared cores as everything "
        f"else. Machine: {report['machine']}. Measured {report['measured_at']} by "
        f"`python -m benchmarks.bench_ceiling{report['args']}`, the sizes one after the other.",
        "",
        "Seconds per phase (chunks/s in brackets):",
        "",
        "| chunks | " + " | ".join(PHASES) + " | all | load before | load after |",
        "|---|" + "---|" * (len(PHASES) + 3),
    ]
    for run in report["runs"]:
        cells = [f"{run['seconds'][p]:.1f} ({run['chunks_per_second'][p]:,.0f})" for p in PHASES]
        lines.append(
            f"| {run['chunks']:,} | " + " | ".join(cells) + f" | {run['total_seconds']:.1f} "
            f"({run['overall_chunks_per_second']:,.0f}) | {run['load_before'].split('load average:')[-1].strip()} | "
            f"{run['load_after'].split('load average:')[-1].strip()} |"
        )
    lines += ["", "Inside the phases (seconds, from the stages' own reports):", ""]
    for run in report["runs"]:
        parts = "; ".join(
            f"{phase}: " + ", ".join(f"{k} {v}" for k, v in values.items())
            for phase, values in run["detail"].items()
        )
        lines.append(f"- {run['chunks']:,} chunks: {parts}")
    lines += ["", report.get("reading", ""), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.bench_scale import server_versions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chunkyard-ceiling-") as tmp:
        url = embedded_database_url(Path(tmp) / "pg")
        store = Store(url)
        store.migrate()
        runs = [one_size(store, n) for n in args.chunks]
        versions = server_versions(url)
        store.close()
        stop_embedded_servers()  # before the folder is removed: a running server keeps writing into it
    report = {
        "server": versions,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": "" if args.chunks == [10000, 100000] else " --chunks " + " ".join(map(str, args.chunks)),
        "runs": runs,
    }
    report["markdown"] = markdown_ceiling(report)  # bench_scale's scale.md shows it as rendered here
    save_section(args.out, "ceiling", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
