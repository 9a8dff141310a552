"""Indexing side by side: chunkyard, LlamaIndex's IngestionPipeline and Haystack, into one Postgres.

The collection is bench_incremental's (the Chroma corpora cut into `--docs` files), the model
all-MiniLM-L6-v2 from its local path, the backend torch for everyone (chunkyard also on ONNX int8),
chunks of 256 model tokens without overlap, HNSW m=16 / ef_construction=64. Each system runs in its
own process on its own database of one embedded Postgres server and reports: full-index wall time,
chunks/s, peak RSS, the time to re-index after one document changed and after one was deleted (the
median of ROUNDS changes and ROUNDS deletions, another document each time), and
the checks (stored chunk count equals what its splitter makes of the folder; a dense top-10 query
finds the changed text). chunkyard also reports its stage timings (load, chunk, embed, BM25,
publish, HNSW build).

    python -m benchmarks.bench_ingest [--docs 1000] [--systems ...] [--peers-python /tmp/peers-venv/bin/python]

Results: benchmarks/results/ingest.md (and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chunkyard.retrieval.settings.names import DEFAULT_CONFIG

from benchmarks.ingest_peers import ROUNDS, TOP_K

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
CONFIG = DEFAULT_CONFIG
SYSTEMS = (
    "chunkyard-onnx-int8",
    "chunkyard-torch",
    "chunkyard-dagster-multiprocess",
    "llamaindex",
    "haystack",
    "haystack-batch8",
)
# peer system -> (framework, texts per model call): `haystack-batch8` is Haystack given the batch that
# chunkyard's embedder uses for 256-token chunks (retrieval.embedders.onnx_encoder.BATCH_TOKENS = 8 x 256), so
# the table shows how much of the difference is that setting alone
PEERS = {"llamaindex": ("llamaindex", 32), "haystack": ("haystack", 32), "haystack-batch8": ("haystack", 8)}
BACKENDS = {
    "chunkyard-torch": {"backend": "torch"},
    "chunkyard-onnx-int8": {"backend": "onnx", "quantize": "int8"},
    "chunkyard-dagster-multiprocess": {"backend": "torch"},
}


def peak_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024.0


def write_configs(root: Path, docs_dir: Path, embedder: dict[str, Any]) -> tuple[Path, Path]:
    """bench_incremental's configs with the embedder backend of this run."""
    import yaml
    from chunkyard.retrieval.settings.config import load_index_configs

    config = load_index_configs(REPO_ROOT / "configs" / "indexes.yaml")[CONFIG]
    entry = json.loads(json.dumps({k: v for k, v in config.as_dict().items() if k != "name"}, default=dict))
    entry["embedder"] = embedder
    indexes_path, collections_path = root / "indexes.yaml", root / "collections.yaml"
    indexes_path.write_text(yaml.safe_dump({"indexes": {CONFIG: entry}}))
    collection = {"folders": [str(docs_dir)], "include": ["**/*.md"], "indexes": [CONFIG]}
    collections_path.write_text(yaml.safe_dump({"collections": {"bench": collection}}))
    return indexes_path, collections_path


def expected_chunks(spec, docs_dir: Path) -> int:
    from chunkyard.chunking import Document, build_chunker

    chunker = build_chunker(spec.config.chunker, config_key=spec.config.config_hash)
    return sum(
        len(chunker.chunk(Document(p.name, p.read_text(encoding="utf-8"))))
        for p in sorted(docs_dir.glob("*.md"))
    )


def run_chunkyard_library(system: str, url: str, docs_dir: Path, root: Path) -> dict[str, Any]:
    """The pipeline steps in one warm process (what `build_index` runs, plus document sync and checks)."""
    from chunkyard.pipeline.graph import run_index_steps
    from chunkyard.pipeline.steps.documents import sync_documents
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import load_collections
    from chunkyard.retrieval.settings.config_checks import load_index_specs
    from chunkyard.retrieval.store import Store

    from benchmarks.ingest_peers import exercise

    indexes_path, collections_path = write_configs(root, docs_dir, BACKENDS[system])
    spec = load_index_specs(indexes_path, collections_path)[0]
    collection = load_collections(collections_path)["bench"]
    store = Store(url)
    store.migrate()
    started = time.perf_counter()
    embedder = load_embedder(spec.config.embedding_model, **BACKENDS[system])
    load_seconds = time.perf_counter() - started
    runs: list[dict[str, Any]] = []

    def timed_run() -> float:
        started = time.perf_counter()
        reports = [sync_documents(store, collection)]
        reports.extend(run_index_steps(store, spec, embedder).values())
        seconds = time.perf_counter() - started
        failed = [c for r in reports for c in r.checks if not c.passed]
        if failed:
            raise RuntimeError(f"{system}: checks failed: {failed}")
        runs.append({**reports[-1].metadata, **reports[2].metadata, "run_seconds": round(seconds, 3)})
        return seconds

    def stored_chunks() -> int:
        return int((store.indexes.info(spec.name) or {}).get("chunks") or runs[-1]["chunks_total"])

    searcher = Searcher(store, embedder_for=lambda _config: embedder)

    def query_finds(needle: str) -> bool:
        hits = searcher.search(needle, spec.name, k=TOP_K, mode="dense")
        return any(needle[:30] in h.text for h in hits)

    result = exercise(
        system,
        docs_dir,
        timed_run,
        stored_chunks,
        lambda: expected_chunks(spec, docs_dir),
        query_finds,
        load_seconds,
    )
    result["runs"] = runs
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return result


def run_chunkyard_dagster(system: str, url: str, docs_dir: Path, root: Path) -> dict[str, Any]:
    """The deployed path: the document sensor, then `execute_job` with the multiprocess executor."""
    from chunkyard.assets.definitions import build_definitions
    from chunkyard.orchestration.instance import get_instance
    from chunkyard.retrieval.settings.config_checks import load_index_specs
    from chunkyard.retrieval.store import Store

    from benchmarks.bench_incremental import sensor_run

    indexes_path, collections_path = write_configs(root, docs_dir, BACKENDS[system])
    os.environ["DAGSTER_HOME"] = str(root / "dagster")
    os.environ["CHUNKYARD_CONFIGS"] = str(root)  # run subprocesses build the same definitions
    spec = load_index_specs(indexes_path, collections_path)[0]
    defs = build_definitions(indexes_path, collections_path, database_url=url)
    instance = get_instance(url)
    store = Store(url)
    state = {"cursor": None}
    runs: list[dict[str, Any]] = []

    def timed_run() -> float:
        started = time.perf_counter()
        run, state["cursor"] = sensor_run(defs, instance, state["cursor"], "multiprocess")
        runs.append(run)
        return time.perf_counter() - started

    def stored_chunks() -> int:
        return int(runs[-1]["chunks_total"])

    def query_finds(needle: str) -> bool:
        from chunkyard.retrieval.embedders.embedder import shared_embedder
        from chunkyard.retrieval.query import Searcher

        embedder = shared_embedder(spec.config.embedding_model, **BACKENDS[system])
        hits = Searcher(store, embedder_for=lambda _c: embedder).search(
            needle, spec.name, k=TOP_K, mode="dense"
        )
        return any(needle[:30] in h.text for h in hits)

    from benchmarks.ingest_peers import exercise

    result = exercise(
        system, docs_dir, timed_run, stored_chunks, lambda: expected_chunks(spec, docs_dir), query_finds, 0.0
    )
    result["runs"] = runs
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)  # the largest step process or this one
    instance.dispose()
    return result


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    root = Path(args.root)
    run = run_chunkyard_dagster if args.worker.endswith("multiprocess") else run_chunkyard_library
    result = run(args.worker, args.db, Path(args.docs_dir), root)
    print("RESULT " + json.dumps(result, default=str), flush=True)


def database(server_url: str, name: str) -> str:
    """A fresh database `name` on the server of `server_url`; its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(server_url.replace("/postgres?", f"/{name}?", 1), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return server_url.replace("/postgres?", f"/{name}?", 1)


def run_system(system: str, args: argparse.Namespace, server_url: str, tmp: Path) -> dict[str, Any]:
    from chunkyard.chunking.models import resolve_model_path

    from benchmarks.bench_incremental import build_corpus

    root = tmp / system
    docs_dir = root / "docs"
    shutil.rmtree(root, ignore_errors=True)
    build_corpus(1000, docs_dir)  # bench_incremental's documents; a smaller run keeps the first --docs
    for extra in sorted(docs_dir.glob("*.md"))[args.docs :]:
        extra.unlink()
    url = database(server_url, system.replace("-", "_"))
    env = {
        **os.environ,
        "CHUNKYARD_HOME": str(tmp / "home"),
        "DATABASE_URL": url,
        "BENCH_THREADS": str(args.threads),
    }
    env["TOKENIZERS_PARALLELISM"] = "false"
    if system in PEERS:
        framework, batch_size = PEERS[system]
        command = [
            args.peers_python,
            "-m",
            "benchmarks.ingest_peers",
            framework,
            "--batch-size",
            str(batch_size),
            "--db",
            url,
            "--docs",
            str(docs_dir),
        ]
        command += ["--model", resolve_model_path("all-MiniLM-L6-v2"), "--size", "256"]
        command += ["--haystack-words", str(args.haystack_words)]
    else:
        command = [sys.executable, "-m", "benchmarks.bench_ingest", "--worker", system, "--db", url]
        command += ["--docs-dir", str(docs_dir), "--root", str(root), "--threads", str(args.threads)]
    load_before = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        return {"system": system, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    result = json.loads(lines[-1][len("RESULT ") :])
    result.update(
        system=system,
        process_seconds=round(wall, 1),
        load_before=[round(x, 2) for x in load_before],
        load_after=[round(x, 2) for x in os.getloadavg()],
        documents=len(list(docs_dir.glob("*.md"))) + ROUNDS,  # ROUNDS were deleted
    )
    return result


NOTES = [
    "How each system is set up (its documented indexing path, defaults except where equal settings are "
    "needed):",
    "",
    "- chunkyard library: `pipeline.steps` (document sync, chunks, embeddings, BM25, publish with the "
    "integrity checks) on `recursive-256`; chunkyard also builds the BM25 index that the peers do not. "
    "Dagster: the document sensor's run through `execute_job` and the multiprocess executor (one process "
    "per step, each loading what it needs; the sensor picks in-process for a small change set).",
    "- LlamaIndex: `IngestionPipeline([SentenceSplitter(chunk_size=256, chunk_overlap=0, tokenizer=the "
    "model's WordPiece), HuggingFaceEmbedding(embed_batch_size=32)], vector_store=PGVectorStore, "
    "docstore=SimpleDocumentStore, docstore_strategy=UPSERTS_AND_DELETE)`; documents built from the files "
    "with the file name excluded from the embedded text. An update is `pipeline.run(all documents)` "
    "(the docstore skips unchanged ones by hash and deletes missing ones).",
    "- Haystack 2.x: `RecursiveDocumentSplitter` (word units, `--haystack-words` words, about 256 model "
    "tokens; Haystack has no splitter counting a Hugging Face tokenizer's tokens) -> "
    "`SentenceTransformersDocumentEmbedder(batch_size=32)` -> `DocumentWriter(PgvectorDocumentStore, "
    "hnsw)`. Haystack has no incremental ingestion, so the benchmark does what a user must: hash the files, "
    "delete a changed or removed file's chunks by a metadata filter, index the changed file. "
    "`haystack-batch8` is the same pipeline with `batch_size=8`: chunkyard's embedder cuts each model call "
    "to at most 2,048 padded tokens (8 texts of 256 word pieces), which embedded 256-token chunks 12-34 % faster "
    "here than 32 texts per call, so this row gives a peer the same setting.",
    "- Every system embeds with sentence-transformers on torch (same versions, 2 threads); chunkyard also "
    "with its ONNX int8 backend. ONNX Runtime already runs with intra-op threads = the 2 cores and "
    "ORT_ENABLE_ALL graph optimisation by default (`SessionOptions()` here), so setting them changes nothing.",
    "- The machine is shared: with a load average well above its 2 cores, wall times stretch for every "
    "system; compare systems by their ratios within this run, not with other runs.",
]


def markdown(report: dict[str, Any]) -> str:
    rows = report["results"]
    ok = [r for r in rows if "error" not in r]
    lines = [
        "# Indexing side by side (full index, one document changed, one deleted)",
        "",
        f"Collection: {report['documents']} documents cut from the Chroma corpora (bench_incremental's). "
        "Model all-MiniLM-L6-v2 from its local path, chunks of 256 model tokens without overlap, embedded "
        f"{report.get('server', 'Postgres + pgvector')} (one server, a database per system), HNSW m=16 / "
        "ef_construction=64, "
        f"{report['threads']} torch threads. Each system in its own process; update and delete times are "
        f"the median of {ROUNDS} re-index calls (another document changed, then deleted, each time; every "
        "round in the JSON) in that warm process (model loaded), except for the Dagster run, which is "
        "the deployed path (sensor tick + run, each step its own process for the full index).",
        f"Machine: {report['machine']}. Measured {report['measured_at']}; load average (1, 5, 15 min) "
        f"{report['load_start']} at the start, {report['load_end']} at the end.",
        f"Peers: {report['peers']}.",
        "",
        "| system | backend | full index s | chunks | chunks/s | peak RSS MB | one changed s | one deleted s "
        "| chunk counts ok | query finds change | load (1 min) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['system']} | - | failed: {r['error']} |||||||||")
            continue
        backend = "onnx int8" if "onnx" in r["system"] else "torch"
        lines.append(
            f"| {r['system']} | {backend} | {r['full_seconds']:.1f} | {r['chunks']} | {r['chunks_per_second']:.2f} "
            f"| {r['peak_rss_mb']:.0f} | {r['update_seconds']:.2f} | {r['delete_seconds']:.2f} "
            f"| {'yes' if r['check_chunk_counts'] else 'NO'} | {'yes' if r['check_query_finds_changed_text'] else 'NO'} "
            f"| {r['load_before'][0]:.1f} → {r['load_after'][0]:.1f} |"
        )
    peers = [r for r in ok if not r["system"].startswith("chunkyard")]
    if peers and ok:
        fastest = min(peers, key=lambda r: r["full_seconds"])
        fastest_update = min(peers, key=lambda r: r["update_seconds"])
        lines += ["", "Ratios (peer time / chunkyard time; > 1: chunkyard faster):", ""]
        for r in ok:
            if not r["system"].startswith("chunkyard"):
                continue
            lines.append(
                f"- {r['system']}: full index {fastest['full_seconds'] / r['full_seconds']:.2f}x vs "
                f"{fastest['system']} (goal 1.5x), one changed document "
                f"{fastest_update['update_seconds'] / r['update_seconds']:.1f}x vs {fastest_update['system']} "
                "(goal 10x); per peer: "
                + ", ".join(
                    f"{p['system']} {p['full_seconds'] / r['full_seconds']:.2f}x full / "
                    f"{p['update_seconds'] / r['update_seconds']:.1f}x update / "
                    f"{p['delete_seconds'] / r['delete_seconds']:.2f}x delete"
                    for p in peers
                )
            )
    stage_rows = [r for r in ok if r["system"].startswith("chunkyard") and r.get("runs")]
    if stage_rows:
        lines += [
            "",
            "chunkyard's full index by stage (share of the stages' wall time; from the publish step's metadata):",
            "",
            "| system | load | chunk | embed | BM25 | publish | HNSW build | embeddings/s | tokens/s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in stage_rows:
            first = r["runs"][0]
            if "load_stage_share" not in first:
                continue
            shares = " | ".join(
                f"{first[f'stage_{s}_seconds']:.2f} s ({first[f'{s}_stage_share']:.1%})"
                for s in ("load", "chunk", "embed", "bm25", "publish", "hnsw")
            )
            lines.append(
                f"| {r['system']} | {shares} | {first.get('embeddings_per_second', '-')} "
                f"| {first.get('embed_tokens_per_second', '-')} |"
            )
    lines.append("")
    lines += NOTES
    return "\n".join(lines) + "\n"


def padding(documents: int, batch: int = 32) -> dict[str, float]:
    """Padded / real model tokens when chunkyard's chunks of the collection are embedded in batches of
    `batch`: in document order (what a caller sending `batch` texts per encode call gets) and sorted by
    length (what one encode call over all texts, or chunkyard's sorted batches, gets)."""
    from chunkyard.chunking import Document, build_chunker
    from chunkyard.chunking.tokenizers import get_tokenizer

    from benchmarks.bench_incremental import build_corpus

    with tempfile.TemporaryDirectory() as tmp:
        paths = build_corpus(1000, Path(tmp))[:documents]
        chunker = build_chunker({"strategy": "recursive", "size": 256, "overlap": 0, "tokenizer": "model"})
        texts = [
            c.text for p in paths for c in chunker.chunk(Document(p.name, p.read_text(encoding="utf-8")))
        ]
    counts = [min(256, n) for n in get_tokenizer("model").count_batch(texts)]

    def padded(ns: list[int]) -> float:
        return sum(max(ns[i : i + batch]) * len(ns[i : i + batch]) for i in range(0, len(ns), batch)) / sum(
            ns
        )

    return {"document_order": round(padded(counts), 3), "sorted": round(padded(sorted(counts)), 3)}


def step_runs(reports: list[dict[str, Any]], which: slice) -> dict[str, list[dict[str, Any]]]:
    """{system: its runs at `which` (0: the full index; 1..ROUNDS: the updates) over all passes}, for
    the in-process systems, whose runs carry the step reports (the Dagster runs have none)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rep in reports:
        for r in rep["results"]:
            runs = [run for run in (r.get("runs") or [])[which] if "embed_seconds" in run]
            if runs:
                out.setdefault(r["system"], []).extend(runs)
    return out


def update_floor(reports: list[dict[str, Any]], fastest_peer_update: float) -> list[str]:
    """Where one changed document's time goes in the in-process runs (all passes' update rounds): the
    model call on the changed chunks against the rest, and what the model call alone allows."""
    import statistics

    lines: list[str] = []
    for system, rounds in step_runs(reports, slice(1, 1 + ROUNDS)).items():
        total = statistics.median(r["run_seconds"] for r in rounds)
        model = statistics.median(r["embed_seconds"] for r in rounds)
        chunks = statistics.median(r["embeddings_computed"] for r in rounds)
        tokens = statistics.median(r["tokens_embedded"] for r in rounds)
        ceiling = fastest_peer_update / model if model else float("inf")
        lines.append(
            f"- {system}: {total * 1000:.0f} ms, of which the model call on the changed chunk(s) "
            f"{model * 1000:.0f} ms ({chunks:.0f} chunk, {tokens:.0f} tokens; medians of {len(rounds)} "
            f"rounds) and the rest (sync, chunking, BM25, publish, checks) {(total - model) * 1000:.0f} ms. "
            f"With no overhead at all, the model call alone would allow at most {ceiling:.1f}x the fastest "
            f"peer's {fastest_peer_update:.2f} s."
        )
    if lines:
        lines = [
            "",
            "Where one changed document's time goes (the in-process runs' stage timings, every pass):",
            "",
            *lines,
        ]
    return lines


def full_floor(reports: list[dict[str, Any]], peers: dict[str, float]) -> list[str]:
    """How much of each in-process full index is the model call (all passes), and the most that the
    model call alone would allow against the fastest peer (`peers`: {system: mean full seconds})."""
    import statistics

    fastest = min(peers, key=peers.__getitem__)
    lines: list[str] = []
    for system, fulls in step_runs(reports, slice(0, 1)).items():
        total = statistics.median(run["run_seconds"] for run in fulls)
        model = statistics.median(run["embed_seconds"] for run in fulls)
        computed = statistics.median(run["embeddings_computed"] for run in fulls)
        chunks = statistics.median(run["chunks_total"] for run in fulls)
        lines.append(
            f"- {system}: {total:.1f} s, of which the model calls {model:.1f} s ({model / total:.0%}; "
            f"{computed:.0f} texts embedded for {chunks:.0f} chunks, the rest repeated texts embedded once). "
            f"With nothing but the model calls, at most {peers[fastest] / model:.2f}x the fastest peer "
            f"({fastest}, {peers[fastest]:.1f} s)."
        )
    if lines:
        lines = ["", "Where the full index's time goes (medians over the passes):", "", *lines]
    return lines


def markdown_passes(reports: list[dict[str, Any]]) -> str:
    """Several passes (the systems in different orders, so a load trend favours none): the geometric
    mean of each time over the passes and its ratios first, then every pass in full."""
    import math

    def gmean(values: list[float]) -> float:
        return math.exp(sum(math.log(max(v, 1e-6)) for v in values) / len(values))

    systems = [r["system"] for r in reports[0]["results"] if "error" not in r]
    mean: dict[str, dict[str, float]] = {}
    for system in systems:
        rows = [r for rep in reports for r in rep["results"] if r["system"] == system and "error" not in r]
        if len(rows) == len(reports):
            mean[system] = {
                k: gmean([r[k] for r in rows]) for k in ("full_seconds", "update_seconds", "delete_seconds")
            }
            mean[system]["chunks"] = rows[0]["chunks"]
    orders = "; ".join(", ".join(r["system"] for r in rep["results"]) for rep in reports)
    lines = [
        "# Indexing side by side (full index, one document changed, one deleted)",
        "",
        f"{len(reports)} passes with the systems in different orders ({orders}), so the load trend of this "
        "shared machine favours none; below, the geometric mean over the passes, then each pass.",
        "",
        (
            "Collection: bench_incremental's 1,000 documents (`make bench-ingest` with no arguments)."
            if reports[0]["documents"] >= 1000
            else f"Collection: the first {reports[0]['documents']} of bench_incremental's 1,000 documents "
            "(`--docs`); a full 1,000-document pass is `make bench-ingest` with no arguments."
        ),
        "",
        "| system | full index s | chunks | chunks/s | one changed s | one deleted s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for system, m in mean.items():
        lines.append(
            f"| {system} | {m['full_seconds']:.1f} | {m['chunks']} | {m['chunks'] / m['full_seconds']:.2f} "
            f"| {m['update_seconds']:.2f} | {m['delete_seconds']:.2f} |"
        )
    peers = {s: m for s, m in mean.items() if not s.startswith("chunkyard")}
    if peers:
        lines += ["", "Ratios of the means (peer time / chunkyard time; > 1: chunkyard faster):", ""]
        for system, m in mean.items():
            if system in peers:
                continue
            lines.append(
                f"- {system}: "
                + ", ".join(
                    f"{p} {pm['full_seconds'] / m['full_seconds']:.2f}x full, "
                    f"{pm['update_seconds'] / m['update_seconds']:.2f}x update, "
                    f"{pm['delete_seconds'] / m['delete_seconds']:.2f}x delete"
                    for p, pm in peers.items()
                )
            )
    if peers:
        lines += full_floor(reports, {p: m["full_seconds"] for p, m in peers.items()})
        lines += update_floor(reports, min(m["update_seconds"] for m in peers.values()))
    pad = reports[0].get("padding") or padding(int(reports[0]["documents"]))
    lines += [
        "",
        f"Padding (measured on chunkyard's chunks of this collection): batches of 32 texts in document order "
        f"hold {pad['document_order']:.2f}x the real model tokens, sorted by length {pad['sorted']:.2f}x. "
        "chunkyard sorts all texts of a run by token count; Haystack's embedder hands all documents to one "
        "sentence-transformers call, which sorts them too; LlamaIndex calls the model `embed_batch_size` "
        "texts at a time, each call sorted only within itself.",
    ]
    lines.append("")
    for i, report in enumerate(reports, 1):
        lines.append(
            markdown(report).replace("# Indexing side by side", f"## Pass {i}: indexing side by side", 1)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument(
        "--peers-python", default=os.environ.get("BENCH_PEERS_PYTHON", "/tmp/peers-venv/bin/python")
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--haystack-words", type=int, default=150)
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest.md")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--docs-dir", help=argparse.SUPPRESS)
    parser.add_argument(
        "--render", type=Path, nargs="+", help="re-render the markdown from saved JSON reports (one per pass)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("CHUNKYARD_DATA", str(REPO_ROOT.parent / "shared" / "datasets"))
    if args.render:
        reports = [json.loads(path.read_text()) for path in args.render]
        text = markdown(reports[0]) if len(reports) == 1 else markdown_passes(reports)
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(reports, indent=2, default=str) + "\n")
        return 0
    if args.worker:
        worker(args)
        return 0
    from chunkyard.retrieval.store.db import embedded_database_url

    load_start = [round(x, 2) for x in os.getloadavg()]
    results = []
    with tempfile.TemporaryDirectory(prefix="chunkyard-ingest-") as tmp:
        server_url = embedded_database_url(Path(tmp) / "pg")
        for system in args.systems:
            print(f"[{system}] ...", flush=True)
            result = run_system(system, args, server_url, Path(tmp))
            print(json.dumps({k: v for k, v in result.items() if k != "runs"}), flush=True)
            results.append(result)
        from benchmarks.bench_scale import server_versions

        server = server_versions(server_url)
    peers = subprocess.run(
        [args.peers_python, "-m", "pip", "freeze"], capture_output=True, text=True, check=False
    ).stdout.split()
    wanted = ("llama-index-core", "llama-index-vector-stores-postgres", "llama-index-embeddings-huggingface")
    wanted += ("haystack-ai", "pgvector-haystack", "sentence-transformers", "torch", "transformers")
    report = {
        "documents": args.docs,
        "threads": args.threads,
        "server": server,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_start": load_start,
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "peers": ", ".join(p for p in peers if p.split("==")[0].lower() in wanted),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(report), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
