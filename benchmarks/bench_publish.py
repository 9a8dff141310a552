"""A large first build's publish against its HNSW build alone: in place vs. the partition swap.

The staging is synthesised in SQL, not produced by the pipeline: N chunks of random words (the
given number of distinct terms each, from a 50,000-word vocabulary, ~600 characters of text),
one document per 10 chunks, and a unit vector of 384 dimensions per chunk, each also in the
embedding cache so publish checks it as it checks real staging. `--vectors random`: normal
components, normalised (no structure: the hardest and slowest data for an HNSW build);
`--vectors clustered`: chunk g is centre g mod 2,000 (random unit vectors) plus noise vector
g * 7919 mod 997 (a pool of random vectors of norm 0.5), normalised: 2,000 clusters of
neighbours at cosine ~0.8, closer to real embeddings, whose builds are several times faster.
The pair of centre and noise is distinct for every chunk below 1,994,000. Each path publishes its own index on one fresh embedded Postgres, one after the
other, with the product's settings (`CHUNKYARD_MAINTENANCE_WORK_MEM`, default 512MB; the HNSW
build with one parallel worker; pgvector's m 16, ef_construction 64). Statements over half a
second are read back from the server log, so the table says where each publish's time went.
For the swap the postings go where stage_bm25 puts them for a swap: straight into the next
version's table, keyed and analyzed before the publish (`prepare` seconds, the BM25 stage's share,
reported apart). With `--graph-alone` the graph is built once more after the publish, alone (the
same `create_hnsw` on the published partition, rolled back), and the ratio is also given against
that build.

    python -m benchmarks.bench_publish [--chunks 100000] [--terms 40] [--paths in_place swap]
        [--vectors random|clustered] [--graph-alone]

Results: the `publish_<chunks>` section of benchmarks/results/scale.md (and .json).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from chunkyard.retrieval.indexing.hnsw import create_hnsw
from chunkyard.retrieval.indexing.publish import publish
from chunkyard.retrieval.indexing.swap import (
    POSTINGS_PREPARED,
    SWAP_MIN_CHUNKS_ENV,
    create_next_postings,
    index_next_postings,
)
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import embedded_database_url, stop_embedded_servers
from chunkyard.retrieval.store.indexes import partition_names
from chunkyard.retrieval.store.staging import merge_run_report
from psycopg import sql

from benchmarks.bench_scale import server_versions, uptime
from benchmarks.scale_report import RESULTS, save_section

VOCABULARY = 50_000
CHUNKS_PER_DOCUMENT = 10
DIM = 384
MODEL = "synthetic-384"
PATHS = {"in_place": "1000000000000", "swap": "1"}  # the swap threshold each path runs under
SLOW_MS = 500
CENTRES, NOISE_POOL, NOISE_NORM = 2_000, 997, 0.5  # --vectors clustered (see the module docstring)
VECTORS = ("random", "clustered")


def _random_vectors(conn: psycopg.Connection, name: str, chunks: int) -> None:
    conn.execute(
        "INSERT INTO staged_embeddings (index_name, chunk_id, embedding)"
        " SELECT %(name)s, 'c' || g, l2_normalize(ARRAY(SELECT random_normal() + 0 * g"
        " FROM generate_series(1, %(dim)s))::vector) FROM generate_series(0, %(n)s - 1) g",
        {"name": name, "dim": DIM, "n": chunks},
    )


def _clustered_vectors(conn: psycopg.Connection, name: str, chunks: int) -> None:
    for table, rows, scale in (("_centres", CENTRES, None), ("_noise", NOISE_POOL, NOISE_NORM)):
        vector = (
            "l2_normalize(ARRAY(SELECT random_normal() + 0 * i FROM generate_series(1, %(dim)s))::vector)"
        )
        if scale is not None:  # pgvector multiplies vectors element-wise: a constant vector scales
            vector += f" * array_fill({scale}::real, ARRAY[%(dim)s])::vector"
        conn.execute(
            f"CREATE TEMP TABLE {table} ON COMMIT DROP AS SELECT i, {vector} AS v"
            " FROM generate_series(0, %(rows)s - 1) i",
            {"dim": DIM, "rows": rows},
        )
    conn.execute(
        "INSERT INTO staged_embeddings (index_name, chunk_id, embedding)"
        " SELECT %(name)s, 'c' || g, l2_normalize(c.v + n.v) FROM generate_series(0, %(n)s - 1) g"
        " JOIN _centres c ON c.i = g %% %(centres)s JOIN _noise n ON n.i = (g::bigint * 7919) %% %(pool)s",
        {"name": name, "n": chunks, "centres": CENTRES, "pool": NOISE_POOL},
    )


# term k of chunk g: distinct within a chunk (k * 1009 < VOCABULARY), tf 2 for every third
_POSTINGS = (
    "SELECT %(name)s, 'c' || g, 'w' || ((g * 31 + k * 1009) %% %(v)s), 1 + (k %% 3 = 0)::int, %(length)s"
    " FROM generate_series(0, %(n)s - 1) g, generate_series(0, %(terms)s - 1) k"
)


def _postings_values(name: str, chunks: int, terms: int) -> dict[str, Any]:
    """`_POSTINGS`'s parameters for `chunks` chunks of `terms` terms of the index `name`."""
    return {"name": name, "v": VOCABULARY, "n": chunks, "terms": terms, "length": terms + (terms + 2) // 3}


def prepare_postings(store: Store, spec: IndexSpec, chunks: int, terms: int) -> float:
    """What stage_bm25 does for a swap, from the synthetic terms: the next postings table filled, keyed
    and analyzed, and the staging marked prepared; the seconds it took."""
    started = time.perf_counter()
    with store.connection() as conn, conn.transaction():
        table = create_next_postings(conn, spec.name)
        insert = sql.SQL("INSERT INTO {} (index_name, chunk_id, term, tf, doc_len) ").format(
            sql.Identifier(table)
        )
        conn.execute(insert + sql.SQL(_POSTINGS), _postings_values(spec.name, chunks, terms))
        index_next_postings(conn, spec.name)
        merge_run_report(conn, spec.name, {POSTINGS_PREPARED: True})
    return round(time.perf_counter() - started, 1)


def stage_postings(store: Store, spec: IndexSpec, chunks: int, terms: int) -> float:
    """What stage_bm25 does for an in-place publish, from the synthetic terms: staged_bm25 filled and
    analyzed; the seconds it took."""
    started = time.perf_counter()
    with store.connection() as conn:
        conn.execute(
            "INSERT INTO staged_bm25 (index_name, chunk_id, term, tf)"
            f" SELECT name, chunk, term, tf FROM ({_POSTINGS}) p(name, chunk, term, tf, length)",
            _postings_values(spec.name, chunks, terms),
        )
        conn.execute("ANALYZE staged_bm25")
    return round(time.perf_counter() - started, 1)


def stage(store: Store, spec: IndexSpec, chunks: int, terms: int, vectors: str = "random") -> float:
    """Synthetic staging for `spec` (see the module docstring) but its postings; the seconds it took."""
    started = time.perf_counter()
    store.indexes.ensure(spec)
    name = spec.name
    with store.connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO staged_runs (index_name, config_hash, full_rebuild, model_id) VALUES (%s, %s, false, %s)",
            (name, spec.config.config_hash, MODEL),
        )
        conn.execute(
            'INSERT INTO staged_chunks (index_name, chunk_id, doc_id, start, "end", text, embed_text,'
            " token_count, content_hash, metadata)"
            " SELECT %(name)s, 'c' || g, 'd' || (g / %(per)s), (g %% %(per)s) * 600, (g %% %(per)s) * 600 + 600,"
            " t.text, t.text, %(terms)s, md5(%(name)s || g), '{}'::jsonb"
            " FROM generate_series(0, %(n)s - 1) g, LATERAL (SELECT string_agg('w' || ((g * 31 + k * 1009) %% %(v)s),"
            " ' ') || ' ' || repeat(md5(g::text), 10) AS text FROM generate_series(0, %(terms)s - 1) k) t",
            {"name": name, "per": CHUNKS_PER_DOCUMENT, "terms": terms, "n": chunks, "v": VOCABULARY},
        )
        (_clustered_vectors if vectors == "clustered" else _random_vectors)(conn, name, chunks)
        for table in ("staged_chunks", "staged_embeddings"):  # planner statistics, as the stages keep
            conn.execute(f"ANALYZE {table}")
        conn.execute(
            "INSERT INTO embedding_cache (model_id, content_hash, embedding)"
            " SELECT %s, s.content_hash, e.embedding FROM staged_chunks s JOIN staged_embeddings e"
            " ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id WHERE s.index_name = %s"
            " ON CONFLICT DO NOTHING",
            (MODEL, name),
        )
        conn.execute(  # each term's document frequency, as stage_bm25 counts it
            "INSERT INTO staged_bm25_terms (index_name, term, df)"
            " SELECT %(name)s, 'w' || t, count(*) FROM generate_series(0, %(n)s - 1) g,"
            " generate_series(0, %(terms)s - 1) k, LATERAL (SELECT (g * 31 + k * 1009) %% %(v)s AS t) w GROUP BY t",
            {"name": name, "v": VOCABULARY, "n": chunks, "terms": terms},
        )
        conn.execute(
            "INSERT INTO staged_bm25_lengths (index_name, chunk_id, length)"
            " SELECT %(name)s, 'c' || g, %(length)s FROM generate_series(0, %(n)s - 1) g",
            {"name": name, "n": chunks, "length": terms + (terms + 2) // 3},
        )
        conn.execute(
            "INSERT INTO staged_documents (index_name, doc_id, sha256)"
            " SELECT %s, 'd' || d, md5('doc' || d) FROM generate_series(0, (%s - 1) / %s) d",
            (name, chunks, CHUNKS_PER_DOCUMENT),
        )
    with store.connection() as conn:
        for table in (
            "staged_chunks",
            "staged_embeddings",
            "staged_bm25_lengths",
            "staged_bm25_terms",
            "staged_documents",
        ):
            conn.execute(f"ANALYZE {table}")
    return round(time.perf_counter() - started, 1)


def slow_statements(log: Path, offset: int) -> list[dict[str, Any]]:
    """Statements the server logged as slower than SLOW_MS since `offset` (their ms and first words)."""
    text = log.read_text(errors="replace")[offset:]
    found = []
    for match in re.finditer(r"duration: ([0-9.]+) ms\s+(?:statement|execute [^:]*): (.*)", text):
        statement = " ".join(match.group(2).split())
        found.append({"ms": float(match.group(1)), "statement": statement[:90]})
    return found


def graph_alone(store: Store, index_name: str) -> float:
    """Seconds of the published partition's HNSW build run alone: a second graph, rolled back."""
    with store.connection() as conn, conn.transaction(force_rollback=True):
        started = time.perf_counter()
        create_hnsw(conn, index_name, DIM, table=partition_names(index_name)["chunks"], name="graph_alone")
        return round(time.perf_counter() - started, 1)


def one_path(
    store: Store, log: Path, path: str, chunks: int, terms: int, vectors: str, alone: bool = False
) -> dict[str, Any]:
    spec = IndexSpec(
        f"publish-{path}",
        IndexConfig(name=f"n{chunks}", chunker={"strategy": "synthetic"}, bm25={"analyzer": "standard"}),
    )
    os.environ[SWAP_MIN_CHUNKS_ENV] = PATHS[path]
    staged_seconds = stage(store, spec, chunks, terms, vectors)
    print(f"  {path}: staged {chunks} chunks in {staged_seconds} s ({uptime()})", flush=True)
    prepare = prepare_postings if path == "swap" else stage_postings
    prepared_seconds = prepare(store, spec, chunks, terms)
    with store.connection() as conn:
        conn.execute("CHECKPOINT")  # the load's dirty pages are written before publish is timed
    print(f"  {path}: postings staged or prepared in {prepared_seconds} s ({uptime()})", flush=True)
    load_before = uptime()
    offset = len(log.read_text(errors="replace"))
    started = time.perf_counter()
    report = publish(store, spec)
    seconds = round(time.perf_counter() - started, 1)
    load_after = uptime()
    print(f"  {path}: publish {seconds} s, HNSW {report.hnsw_seconds} s ({load_after})", flush=True)
    slow = slow_statements(log, offset)
    print("  slow: " + "; ".join(f"{s['ms'] / 1000:.1f} s {s['statement'][:70]}" for s in slow), flush=True)
    alone_seconds = graph_alone(store, spec.name) if alone else None
    if alone:
        print(f"  {path}: graph alone {alone_seconds} s ({uptime()})", flush=True)
    return {
        "path": path,
        "chunks": report.chunks_inserted,
        "postings": chunks * terms,
        "staged_seconds": staged_seconds,
        "postings_prepared_seconds": prepared_seconds,
        "publish_seconds": seconds,
        "hnsw_seconds": report.hnsw_seconds,
        "ratio": round(seconds / report.hnsw_seconds, 2) if report.hnsw_seconds else None,
        "slow_statements": slow,
        "hnsw_alone_seconds": alone_seconds,
        "ratio_alone": round(seconds / alone_seconds, 2) if alone_seconds else None,
        "load_alone_after": uptime() if alone else None,
        "load_before": load_before,
        "load_after": load_after,
    }


VECTOR_WORDS = {
    "random": "random unit vectors",
    "clustered": f"clustered unit vectors ({CENTRES:,} random centres plus noise of norm {NOISE_NORM} from a pool "
    f"of {NOISE_POOL}, normalised)",
}


def markdown_publish(report: dict[str, Any]) -> str:
    lines = [
        f"## A large first build's publish against its HNSW build ({report['runs'][0]['chunks']:,} chunks)",
        "",
        f"Synthetic staging (`benchmarks/bench_publish.py`: random words, {report['terms']} distinct terms per "
        f"chunk from a {VOCABULARY:,}-word vocabulary, ~600 characters of text, {VECTOR_WORDS[report.get('vectors', 'random')]} of {DIM} "
        "dimensions, also in the embedding cache; written by SQL into the staging tables, not by the pipeline). "
        f"Each path publishes its own index, one after the other, on one fresh embedded {report['server']} "
        f"with the product's build settings: maintenance_work_mem {report['maintenance_work_mem']}, the HNSW "
        f"build with 1 parallel worker, m 16, ef_construction 64; shared_buffers {report['shared_buffers']}. "
        f"Machine: {report['machine']}. Measured {report['measured_at']} by "
        f"`python -m benchmarks.bench_publish{report['args']}`.",
        "",
        "| chunks | postings | path | postings prepared s (before publish) | publish s |"
        " HNSW build s (in publish) | publish / HNSW | graph alone s | publish / graph alone | load before |"
        " load after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        alone = run.get("hnsw_alone_seconds")
        alone_cells = f"{alone:.1f} | {run['ratio_alone']:.2f}x" if alone else "- | -"
        # the swap's postings are prepared by the BM25 stage (in place: staged_bm25 filled), not in publish
        prepared = f"{run['postings_prepared_seconds']:.1f}" if "postings_prepared_seconds" in run else "-"
        lines.append(
            f"| {run['chunks']:,} | {run['postings']:,} | {run.get('label', run['path'])} | {prepared} | "
            f"{run['publish_seconds']:.1f} | "
            f"{run['hnsw_seconds']:.1f} | {run['ratio']:.2f}x | "
            f"{alone_cells} | "
            f"{run['load_before'].split('load average:')[-1].strip()} | "
            f"{run['load_after'].split('load average:')[-1].strip()} |"
        )
    lines += ["", f"Statements over {SLOW_MS} ms inside each publish (server log):", ""]
    for run in report["runs"]:
        slow = "; ".join(f"{s['ms'] / 1000:.1f} s `{s['statement'][:60]}`" for s in run["slow_statements"])
        lines.append(f"- {run['chunks']:,} chunks, {run.get('label', run['path'])}: {slow}")
    lines += ["", report.get("reading", ""), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--terms", type=int, default=40)
    parser.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=["in_place", "swap"])
    parser.add_argument("--vectors", choices=VECTORS, default="random")
    parser.add_argument("--graph-alone", action="store_true", help="also time the graph built alone")
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.md")
    args = parser.parse_args(argv)
    if args.terms * 1009 >= VOCABULARY:
        parser.error(f"--terms: at most {VOCABULARY // 1009} (terms must be distinct within a chunk)")
    with tempfile.TemporaryDirectory(prefix="chunkyard-publish-", dir=os.environ.get("TMPDIR")) as tmp:
        url = embedded_database_url(Path(tmp) / "pg")
        log = Path(tmp) / "pg" / "log"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET log_min_duration_statement = {SLOW_MS}")
            conn.execute("SELECT pg_reload_conf()")
            shared_buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
        store = Store(url)
        store.migrate()
        runs = [
            one_path(store, log, path, args.chunks, args.terms, args.vectors, args.graph_alone)
            for path in args.paths
        ]
        versions = server_versions(url)
        store.close()
        stop_embedded_servers()  # before the folder is removed: a running server keeps writing into it
    report = {
        "server": versions,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": f" --chunks {args.chunks} --terms {args.terms} --vectors {args.vectors}"
        + ("" if args.paths == ["in_place", "swap"] else " --paths " + " ".join(args.paths))
        + (" --graph-alone" if args.graph_alone else ""),
        "terms": args.terms,
        "vectors": args.vectors,
        "maintenance_work_mem": os.environ.get("CHUNKYARD_MAINTENANCE_WORK_MEM", "512MB"),
        "shared_buffers": shared_buffers,
        "runs": runs,
    }
    report["markdown"] = markdown_publish(report)
    save_section(args.out, f"publish_{args.chunks:08d}", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
