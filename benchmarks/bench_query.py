"""Query benchmark: load/build time, p50/p95 latency per mode, HNSW recall, BM25 vs rank-bm25.

Corpus (real-derived, as issue 4 asks): the five Chroma corpora are cut into overlapping windows
of the embedding model's tokens (default 64 tokens, stride 16: ~23k real chunks) and embedded
with the real all-MiniLM-L6-v2 (ONNX fp32 backend: the same vectors as torch, faster; cached in
the benchmark database's embedding cache so reruns skip it). The corpus is expanded to N chunks
by copies of the real chunks, two ways (`--expansion`):

- `noise`: copy c of real chunk i gets normalise(v_i + sigma * g), g ~ N(0, I/dim) (sigma 0.25:
  cosine to the original ~0.97). Every real chunk becomes a tight ball of ~N/23k near-ties in
  random directions: the adversarial case for a graph index.
- `mix`: copy c of real chunk i gets normalise((1 - t) * v_i + t * v_j), j one of i's 10 nearest
  real chunks and t ~ U(0, 0.5): new points on the segments between related real passages, so the
  expanded set keeps the real data's shape (what a bigger corpus on the same topics looks like).

Either way the copy's text is chunk i's with ~10% of its words dropped (a seeded choice), so BM25
statistics stay realistic too. Each copy of a corpus is one document whose text is its chunks
joined by blank lines, so every span is exact.

Everything is loaded through the real indexing path (stage_chunks with the vectors precomputed,
stage_bm25, publish: binary COPY, one transaction, HNSW built after the load) into a separate
embedded Postgres under CHUNKYARD_HOME/bench-pg (or CHUNKYARD_BENCH_DATABASE_URL).

Queries: 200 real questions from Chroma's questions_df.csv (seeded sample). Before measuring,
each index gets warm-up traffic, as a running service would: the other 272 questions and 2,000
real passages (seeded sample) as queries, dense at the largest ef_search and BM25; none of them
is measured. Latency is measured per query in-process (Searcher), query embedding
included and also reported separately.
Recall@10 of HNSW is against exact cosine search (numpy over the same stored vectors).
rank-bm25 `BM25Okapi.get_scores` is timed on the same tokens; our scores are checked against it.

    python -m benchmarks.bench_query [--sizes 100000,1000000] [--expansions noise,mix] [--reuse]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
CORPORA = ("state_of_the_union", "wikitexts", "chatlogs", "finance", "pubmed")
EXPANSIONS = ("noise", "mix")


def data_dir() -> Path:
    return Path(os.environ.get("CHUNKYARD_DATA", REPO_ROOT.parent / "shared" / "datasets")) / "chroma_general"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def load_questions(n: int, seed: int) -> tuple[list[str], list[str]]:
    """A seeded sample of n questions to measure, and the remaining ones (used to warm up)."""
    with open(data_dir() / "questions_df.csv", encoding="utf-8", newline="") as handle:
        questions = [row["question"] for row in csv.DictReader(handle)]
    order = np.random.default_rng(seed).permutation(len(questions))
    return [questions[i] for i in order[:n]], [questions[i] for i in order[n:]]


def base_chunks(size: int, overlap: int) -> list[tuple[str, str]]:
    """(corpus, text) of real windows of `size` model tokens over the five corpora."""
    from chunkyard.chunking import build_chunker
    from chunkyard.chunking.types import Document

    chunker = build_chunker({"strategy": "token", "size": size, "overlap": overlap, "tokenizer": "model"})
    out = []
    for corpus in CORPORA:
        text = (data_dir() / f"{corpus}.md").read_text(encoding="utf-8")
        for chunk in chunker.chunk(Document(corpus, text)):
            if chunk.text.strip():
                out.append((corpus, chunk.text))
    return out


def embed_base(store: Any, embedder: Any, texts: list[str]) -> np.ndarray:
    """Real MiniLM vectors of the base chunks, from the embedding cache or computed (and cached)."""
    from chunkyard.chunking.types import sha256_text

    hashes = [sha256_text(t) for t in texts]
    cached = store.embedding_cache.lookup(embedder.model_id, hashes)
    missing = [i for i, h in enumerate(hashes) if h not in cached]
    log(f"base vectors: {len(texts) - len(missing)} cached, {len(missing)} to embed with {embedder.model_id}")
    started = time.perf_counter()
    for start in range(0, len(missing), 512):
        batch = missing[start : start + 512]
        vectors = embedder.embed([texts[i] for i in batch])
        fresh = {hashes[i]: v for i, v in zip(batch, vectors, strict=True)}
        store.embedding_cache.add(embedder.model_id, fresh)
        cached.update(fresh)
        if start // 512 % 10 == 0:
            done = start + len(batch)
            rate = done / max(time.perf_counter() - started, 1e-9)
            log(f"  embedded {done}/{len(missing)} ({rate:.1f} chunks/s)")
    return np.stack([cached[h] for h in hashes]).astype(np.float32)


def nearest_neighbours(vectors: np.ndarray, k: int, block: int = 2048) -> np.ndarray:
    """Indices of each vector's k nearest others by cosine (exact, blockwise)."""
    out = np.empty((len(vectors), k), dtype=np.int64)
    for start in range(0, len(vectors), block):
        sims = vectors[start : start + block] @ vectors.T
        sims[np.arange(len(sims)), np.arange(start, start + len(sims))] = -np.inf
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
        out[start : start + block] = np.take_along_axis(top, order, axis=1)
    return out


class ExpandedCorpus:
    """N chunks derived from the real ones: copies with perturbed vectors and word-dropped texts."""

    def __init__(
        self,
        base: list[tuple[str, str]],
        vectors: np.ndarray,
        n: int,
        expansion: str,
        sigma: float,
        seed: int,
    ) -> None:
        if expansion not in EXPANSIONS:
            raise ValueError(f"expansion must be one of {EXPANSIONS}, got {expansion!r}")
        self.base = base
        self.base_vectors = vectors
        self.n = n
        self.copies = -(-n // len(base))
        self.expansion = expansion
        self.sigma = sigma
        self.seed = seed
        self.neighbours = nearest_neighbours(vectors, 10) if expansion == "mix" else None

    def perturb(self, i: int, rng: np.random.Generator) -> np.ndarray:
        """The vector of one copy of real chunk i."""
        vector = self.base_vectors[i]
        if self.expansion == "noise":
            dim = vector.shape[0]
            vector = vector + self.sigma * rng.standard_normal(dim).astype(np.float32) / np.sqrt(dim)
        else:
            j = self.neighbours[i][rng.integers(self.neighbours.shape[1])]
            t = rng.uniform(0.0, 0.5)
            vector = (1.0 - t) * vector + t * self.base_vectors[j]
        return (vector / np.linalg.norm(vector)).astype(np.float32)

    def documents_and_chunks(self, config_key: str) -> tuple[list[Any], dict[str, list[Any]], np.ndarray]:
        """Documents (one per corpus copy), their chunks (vectors precomputed), all vectors in chunk order."""
        from chunkyard.chunking.types import Chunk, Document

        rng = np.random.default_rng(self.seed)
        copy_cosines: list[float] = []
        documents: list[Any] = []
        chunks_by_doc: dict[str, list[Any]] = {}
        all_vectors = []
        produced = 0
        for copy in range(self.copies):
            by_corpus: dict[str, list[tuple[str, np.ndarray]]] = {}
            for i, (corpus, text) in enumerate(self.base):
                if produced >= self.n:
                    break
                vector = self.base_vectors[i]
                if copy > 0:
                    words = text.split(" ")
                    keep = rng.random(len(words)) >= 0.1
                    keep[0] = True
                    text = " ".join(w for w, k in zip(words, keep, strict=True) if k)
                    vector = self.perturb(i, rng)
                    copy_cosines.append(float(vector @ self.base_vectors[i]))
                by_corpus.setdefault(corpus, []).append((text, vector.astype(np.float32)))
                produced += 1
            for corpus, items in by_corpus.items():
                doc_id = f"{corpus}@{copy}"
                pieces, chunks, cursor = [], [], 0
                for text, vector in items:
                    start, end = cursor, cursor + len(text)
                    chunk = Chunk(doc_id, start, end, text, token_count=0, config_key=config_key)
                    chunk.embedding = vector
                    chunks.append(chunk)
                    all_vectors.append(vector)
                    pieces.append(text)
                    cursor = end + 2
                documents.append(
                    Document(doc_id, "\n\n".join(pieces), metadata={"corpus": corpus, "copy": copy})
                )
                chunks_by_doc[doc_id] = chunks
        self.copy_cosine_quartiles = [float(q) for q in np.percentile(copy_cosines or [1.0], [25, 50, 75])]
        return documents, chunks_by_doc, np.stack(all_vectors)


class PrecomputedChunker:
    """Returns the chunks built with the documents (what a late chunker would hand the indexer)."""

    def __init__(self, chunks_by_doc: dict[str, list[Any]]) -> None:
        self.chunks_by_doc = chunks_by_doc

    def chunk(self, document: Any) -> list[Any]:
        return self.chunks_by_doc[document.id]

    def chunk_batch(self, documents: Any) -> list[list[Any]]:
        return [self.chunk(d) for d in documents]


def build(
    store: Any, embedder: Any, corpus: ExpandedCorpus, name: str
) -> tuple[Any, dict[str, float], np.ndarray]:
    from chunkyard.retrieval.indexing.bm25 import stage_bm25
    from chunkyard.retrieval.indexing.chunks import stage_chunks
    from chunkyard.retrieval.indexing.embeddings import stage_embeddings
    from chunkyard.retrieval.indexing.publish import publish
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

    spec = IndexSpec(
        f"bench-{name}",
        IndexConfig(
            name=name,
            chunker={"strategy": "bench-windows", "size": corpus.n},
            bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"},
            hybrid={"fusion": "rrf", "rrf_k": 60, "candidates": 50},
        ),
    )
    store.indexes.drop(spec.name)
    documents, chunks_by_doc, vectors = corpus.documents_and_chunks(spec.config.config_hash)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    store.documents.sync(spec.collection, documents, [])
    timings["documents_s"] = time.perf_counter() - started
    for step, call in (
        (
            "stage_chunks_s",
            lambda: stage_chunks(store, spec, chunker=PrecomputedChunker(chunks_by_doc)),
        ),
        ("stage_embeddings_s", lambda: stage_embeddings(store, spec, embedder)),
        ("stage_bm25_s", lambda: stage_bm25(store, spec)),
        ("publish_s", lambda: publish(store, spec)),
    ):
        t0 = time.perf_counter()
        report = call()
        timings[step] = time.perf_counter() - t0
        log(
            f"  {step}: {timings[step]:.1f}s {getattr(report, 'as_metadata', lambda: {})().get('chunks_total', '')}"
        )
    timings["total_s"] = sum(timings.values())
    return spec, timings, vectors


def measure(searcher: Any, spec: Any, questions: list[str], mode: str, **kwargs: Any) -> dict[str, float]:
    totals, without_embedding = [], []
    for question in questions:
        t0 = time.perf_counter()
        results = searcher.search(question, spec.name, k=10, mode=mode, **kwargs)
        elapsed = (time.perf_counter() - t0) * 1000
        totals.append(elapsed)
        embed = results[0].timings.get("embed_ms", 0.0) if results else 0.0
        without_embedding.append(elapsed - embed)
    return {
        "p50_ms": percentile(totals, 50),
        "p95_ms": percentile(totals, 95),
        "p50_ms_without_query_embedding": percentile(without_embedding, 50),
        "p95_ms_without_query_embedding": percentile(without_embedding, 95),
    }


def run_size(
    store: Any,
    embedder: Any,
    base: list[tuple[str, str]],
    base_vectors: np.ndarray,
    n: int,
    expansion: str,
    args: Any,
    questions: list[str],
    warmup: list[str],
) -> dict[str, Any]:
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.store import bm25 as bm25_lib

    name = variant_name(n, expansion, args)
    log(f"== {name}: build")
    existing = store.indexes.info(f"bench-{name}/{name}")
    if args.reuse and existing and existing["chunk_count"] == n and name in args.previous_builds:
        from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

        log("  reusing the index built by a previous run (build times from that run)")
        spec = IndexSpec(f"bench-{name}", IndexConfig(**{k: v for k, v in existing["config"].items()}))
        build_timings = args.previous_builds[name]
    else:
        corpus = ExpandedCorpus(base, base_vectors, n, expansion, args.sigma, args.seed)
        spec, build_timings, _ = build(store, embedder, corpus, name)
        build_timings["copy_cosine_to_original_quartiles"] = corpus.copy_cosine_quartiles
    out: dict[str, Any] = {
        "name": name,
        "chunks": n,
        "expansion": expansion,
        "sigma": args.sigma if expansion == "noise" else None,
        "hnsw_m": args.hnsw_m,
        "hnsw_ef_construction": args.hnsw_ef_construction,
        "build": build_timings,
    }
    info = store.indexes.info(spec.name)
    out["index_info"] = {k: info[k] for k in ("chunk_count", "bm25_vocabulary", "document_count", "version")}
    with store.connection() as conn:
        size = conn.execute(
            "SELECT pg_total_relation_size(%s), pg_relation_size(%s)",
            (info["partition"], info["partition"] + "_hnsw"),
        ).fetchone()
    out["partition_bytes"], out["hnsw_bytes"] = int(size[0]), int(size[1])

    # query vectors once (the same for every dense measurement and for exact search)
    qvecs = embedder.embed(questions)
    searcher = Searcher(store, embedder, bm25_backend="sql")
    memory_searcher = Searcher(store, embedder, bm25_backend="memory")
    out["bm25_memory_load_s"] = memory_searcher.warm(spec.name)
    log(f"  warm-up: {len(warmup)} queries, dense (ef_search={max(args.ef_search)}) and BM25")
    for question in warmup:
        searcher.search(question, spec.name, k=10, mode="dense", ef_search=max(args.ef_search))
        memory_searcher.search(question, spec.name, k=10, mode="bm25")

    # recall@10 of HNSW vs exact cosine (numpy over the stored vectors, in corpus order)
    with store.connection() as conn, conn.cursor(binary=True) as cur:
        from chunkyard.retrieval.store.indexes import partition_names
        from chunkyard.retrieval.store.vectors import as_array
        from psycopg import sql

        cur.execute(
            sql.SQL("SELECT chunk_id, embedding FROM {}").format(
                sql.Identifier(partition_names(spec.name)["chunks"])
            )
        )
        stored_ids, stored = [], []
        for cid, vec in cur:
            stored_ids.append(cid)
            stored.append(as_array(vec))
    matrix = np.stack(stored)
    exact_top = np.argsort(-(qvecs @ matrix.T), axis=1)[:, :10]
    exact_sets = [{stored_ids[j] for j in row} for row in exact_top]
    del matrix
    out["dense"] = {}
    for ef in args.ef_search:
        recalls = []
        latencies = []
        for qi, question in enumerate(questions):
            t0 = time.perf_counter()
            results = searcher.search(question, spec.name, k=10, mode="dense", ef_search=ef)
            latencies.append((time.perf_counter() - t0) * 1000 - results[0].timings.get("embed_ms", 0.0))
            recalls.append(len({r.chunk_id for r in results} & exact_sets[qi]) / 10)
        out["dense"][f"ef_search={ef}"] = {
            "recall_at_10": float(np.mean(recalls)),
            "p50_ms_without_query_embedding": percentile(latencies, 50),
            "p95_ms_without_query_embedding": percentile(latencies, 95),
        }
        log(f"  dense ef={ef}: recall@10 {np.mean(recalls):.3f}, p95 {percentile(latencies, 95):.1f} ms")

    searcher.ef_search = memory_searcher.ef_search = args.default_ef
    out["latency_ef_search"] = args.default_ef
    out["latency"] = {
        "dense": measure(searcher, spec, questions, "dense"),
        "bm25 (Postgres postings)": measure(searcher, spec, questions, "bm25"),
        "bm25 (in-memory copy)": measure(memory_searcher, spec, questions, "bm25"),
        "hybrid (Postgres BM25)": measure(searcher, spec, questions, "hybrid"),
        "hybrid (in-memory BM25)": measure(memory_searcher, spec, questions, "hybrid"),
        "hybrid + rerank maxsim@20 (in-memory BM25)": measure(
            memory_searcher, spec, questions[: args.rerank_questions], "hybrid", rerank="maxsim"
        ),
    }
    for mode, numbers in out["latency"].items():
        log(f"  {mode}: p50 {numbers['p50_ms']:.1f} ms, p95 {numbers['p95_ms']:.1f} ms")

    # rank-bm25 on the same tokens: latency, and our scores against its scores
    from rank_bm25 import BM25Okapi

    analyzer = bm25_lib.build_analyzer(spec.config.bm25)
    memory = memory_searcher.lexical.loaded(spec.name)
    texts_by_id = {}
    with store.connection() as conn:
        from chunkyard.retrieval.store.indexes import partition_names
        from psycopg import sql

        for cid, text in conn.execute(
            sql.SQL("SELECT chunk_id, embed_text FROM {}").format(
                sql.Identifier(partition_names(spec.name)["chunks"])
            )
        ):
            texts_by_id[cid] = text
    t0 = time.perf_counter()
    oracle = BM25Okapi(
        [analyzer.analyze(texts_by_id[cid]) for cid in memory.chunk_ids], k1=1.5, b=0.75, epsilon=0.25
    )
    out["rank_bm25_build_s"] = time.perf_counter() - t0
    del texts_by_id
    latencies, max_diff = [], 0.0
    for question in questions[: args.rank_bm25_questions]:
        tokens = analyzer.analyze(question)
        t0 = time.perf_counter()
        expected = oracle.get_scores(tokens)
        latencies.append((time.perf_counter() - t0) * 1000)
        max_diff = max(max_diff, float(np.max(np.abs(memory.scores(tokens) - expected))))
    out["rank_bm25"] = {
        "queries": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "max_abs_score_difference_vs_ours": max_diff,
    }
    log(f"  rank-bm25 get_scores: p50 {out['rank_bm25']['p50_ms']:.0f} ms; max |diff| {max_diff:.2e}")
    del oracle
    return out


def column_label(entry: dict[str, Any]) -> str:
    """'1,000,000 chunks, mix, m=16, efc=64' (older entries: noise, m=16, efc=64)."""
    expansion = entry.get("expansion", "noise")
    if expansion == "noise":
        expansion += f" σ={entry.get('sigma') or 0.25}"
    m, efc = entry.get("hnsw_m", 16), entry.get("hnsw_ef_construction", 64)
    return f"{entry['chunks']:,} chunks, {expansion}, m={m}, efc={efc}"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Query benchmark",
        "",
        f"Machine: {report['machine']}. Corpus: {report['base_chunks']} real chunks "
        f"({report['base_size']} model tokens, stride {report['base_size'] - report['base_overlap']}) of the Chroma "
        f"corpora, embedded with {report['embedder']}; expanded by copies (`noise`: Gaussian perturbation; "
        f"`mix`: interpolation towards a real neighbour; see the module docstring). "
        f"{report['questions']} real Chroma questions, k=10, measured after a warm-up on the other questions. "
        f"Postgres: shared_buffers {report.get('shared_buffers', '128MB')}, maintenance_work_mem "
        f"{report.get('maintenance_work_mem', '2GB')} for the HNSW build. Latency includes query embedding unless noted.",
        "",
    ]
    sizes = report["sizes"]
    header = "| | " + " | ".join(column_label(s) for s in sizes) + " |"
    lines += [header, "|---" * (len(sizes) + 1) + "|"]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    row("load + build total (s)", [f"{s['build']['total_s']:.0f}" for s in sizes])
    for step in ("documents_s", "stage_chunks_s", "stage_bm25_s", "publish_s"):
        row(f"  {step.replace('_s', '')} (s)", [f"{s['build'][step]:.1f}" for s in sizes])
    row("partition size (MB)", [f"{s['partition_bytes'] / 1e6:.0f}" for s in sizes])
    row("HNSW size (MB)", [f"{s['hnsw_bytes'] / 1e6:.0f}" for s in sizes])
    row(
        "cosine of a copy to its real chunk (quartiles)",
        [
            " / ".join(f"{q:.3f}" for q in s["build"].get("copy_cosine_to_original_quartiles", [])) or "–"
            for s in sizes
        ],
    )
    efs = sorted({ef for s in sizes for ef in s["dense"]}, key=lambda e: int(e.split("=")[1]))
    for ef in efs:
        missing = {"recall_at_10": float("nan"), "p50_ms_without_query_embedding": float("nan")}
        missing["p95_ms_without_query_embedding"] = float("nan")
        for s in sizes:
            s["dense"].setdefault(ef, missing)
        row(f"HNSW recall@10, {ef}", [f"{s['dense'][ef]['recall_at_10']:.3f}" for s in sizes])
        row(
            f"dense p50 / p95 ms (no query embedding), {ef}",
            [
                f"{s['dense'][ef]['p50_ms_without_query_embedding']:.1f} / {s['dense'][ef]['p95_ms_without_query_embedding']:.1f}"
                for s in sizes
            ],
        )
    row("ef_search of the latency rows below", [str(s.get("latency_ef_search", 100)) for s in sizes])
    for mode in sizes[0]["latency"]:
        row(
            f"{mode} p50 / p95 ms",
            [f"{s['latency'][mode]['p50_ms']:.1f} / {s['latency'][mode]['p95_ms']:.1f}" for s in sizes],
        )
        row(
            f"{mode} p50 / p95 ms without query embedding",
            [
                f"{s['latency'][mode]['p50_ms_without_query_embedding']:.1f} / "
                f"{s['latency'][mode]['p95_ms_without_query_embedding']:.1f}"
                for s in sizes
            ],
        )
    row("BM25 in-memory copy load (s)", [f"{s['bm25_memory_load_s']:.1f}" for s in sizes])
    row(
        "rank-bm25 get_scores p50 / p95 ms",
        [f"{s['rank_bm25']['p50_ms']:.0f} / {s['rank_bm25']['p95_ms']:.0f}" for s in sizes],
    )
    row(
        "max abs score diff ours vs rank-bm25",
        [f"{s['rank_bm25']['max_abs_score_difference_vs_ours']:.1e}" for s in sizes],
    )
    lines += ["", report.get("notes", "")]
    return "\n".join(lines) + "\n"


def variant_name(n: int, expansion: str, args: Any) -> str:
    """Index name of one benchmark variant: the size, then every non-default choice."""
    name = f"n{n}"
    if expansion != "noise":
        name += f"-{expansion}"
    if (args.hnsw_m, args.hnsw_ef_construction) != (16, 64):
        name += f"-m{args.hnsw_m}-efc{args.hnsw_ef_construction}"
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated chunk counts")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--base-size", type=int, default=64)
    parser.add_argument("--base-overlap", type=int, default=48)
    parser.add_argument(
        "--expansions",
        type=lambda s: [x for x in s.split(",") if x],
        default=list(EXPANSIONS),
        help=f"comma-separated, from {EXPANSIONS}; each is built and measured at every size",
    )
    parser.add_argument("--sigma", type=float, default=0.25, help="noise expansion only")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--hnsw-ef-construction", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--ef-search",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[40, 100, 200, 400, 600, 800, 1000],
    )
    parser.add_argument("--default-ef", type=int, default=100)
    parser.add_argument(
        "--warmup-passages", type=int, default=2000, help="real passages run as warm-up queries per index"
    )
    parser.add_argument("--rerank-questions", type=int, default=50)
    parser.add_argument("--rank-bm25-questions", type=int, default=10)
    parser.add_argument(
        "--max-base", type=int, default=0, help="use only the first N real chunks (smoke runs)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="measure queries on indexes a previous run built (same sizes)"
    )
    parser.add_argument("--append", action="store_true", help="add these sizes to the existing results file")
    parser.add_argument("--backend", default="onnx", help="embedder backend for the base vectors and queries")
    args = parser.parse_args(argv)
    if not (data_dir() / "questions_df.csv").is_file():
        print(f"bench_query: Chroma data not found in {data_dir()}; set CHUNKYARD_DATA", file=sys.stderr)
        return 2
    # a 1M-chunk graph (~2 GB) must fit in memory while it is built, and stay in shared buffers after
    os.environ.setdefault("CHUNKYARD_MAINTENANCE_WORK_MEM", "8GB")
    os.environ.setdefault("CHUNKYARD_PG_SHARED_BUFFERS", "6GB")
    os.environ["CHUNKYARD_HNSW_M"] = str(args.hnsw_m)
    os.environ["CHUNKYARD_HNSW_EF_CONSTRUCTION"] = str(args.hnsw_ef_construction)
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import chunkyard_home, embedded_database_url

    url = os.environ.get("CHUNKYARD_BENCH_DATABASE_URL") or embedded_database_url(
        chunkyard_home() / "bench-pg"
    )
    store = Store(url)
    store.migrate()
    embedder = load_embedder(backend=args.backend, batch_size=64)
    questions, warmup = load_questions(args.questions, args.seed)
    log("chunking the Chroma corpora")
    base = base_chunks(args.base_size, args.base_overlap)
    if args.max_base:
        base = base[: args.max_base]
    log(f"{len(base)} real chunks")
    # warm-up traffic: the questions not measured, then real passages as queries (none is measured)
    picks = np.random.default_rng(args.seed + 1).choice(
        len(base), size=min(args.warmup_passages, len(base)), replace=False
    )
    warmup += [base[i][1] for i in picks]
    base_vectors = embed_base(store, embedder, [t for _, t in base])
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "embedder": embedder.model_id,
        "base_chunks": len(base),
        "base_size": args.base_size,
        "base_overlap": args.base_overlap,
        "questions": len(questions),
        "shared_buffers": os.environ["CHUNKYARD_PG_SHARED_BUFFERS"],
        "maintenance_work_mem": os.environ["CHUNKYARD_MAINTENANCE_WORK_MEM"],
        "sizes": [],
    }
    previous = RESULTS_DIR / "query.json"
    previous_sizes = json.loads(previous.read_text()).get("sizes", []) if previous.is_file() else []
    args.previous_builds = {
        entry.get("name", f"n{entry['chunks']}"): entry["build"] for entry in previous_sizes
    }
    if args.append:
        report["sizes"] = previous_sizes
    unknown = set(args.expansions) - set(EXPANSIONS)
    if unknown:
        parser.error(f"--expansions: unknown {sorted(unknown)}; choose from {EXPANSIONS}")
    variants = [(int(x), e) for x in args.sizes.split(",") for e in args.expansions]
    for n, expansion in variants:
        load_before = os.getloadavg()[0]
        result = run_size(store, embedder, base, base_vectors, n, expansion, args, questions, warmup)
        result["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        report["sizes"] = [s for s in report["sizes"] if s.get("name") != result["name"]] + [result]
        report["sizes"].sort(key=lambda s: (s["chunks"], s["name"]))
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (RESULTS_DIR / "query.json").write_text(json.dumps(report, indent=2))
        (RESULTS_DIR / "query.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
