"""Scale-out: a full index of the 1,000-document collection on one and on two Celery workers, side by side.

The collection and config are bench_incremental's (Chroma corpora cut into equal documents,
`recursive-256`). For each worker count, on a fresh database of one embedded Postgres: a loopback
redis-server, N `dagster-celery` workers (solo pool, one process each), and one run of every
asset launched by `dagster asset materialize` with the `celery` executor mode. The workers are
started and warm (they answer on the broker) before the clock starts; each loads the model on its
first model step, as a deployed worker would once.

    python -m benchmarks.bench_scale [--docs 1000] [--workers 1 2] [--config recursive-256]

With `--endpoint-latency S` the embedder is instead the fake OpenAI-compatible server
(tests/fake_embedding_server.py, its own process on loopback) answering every request after S
seconds, and CHUNKYARD_EMBED_SHARDS (`--shards`, default 2) splits each embedding step into parts
that run on any worker: the honest test of scale-out on a 2-core machine, where the work waits on the
server rather than on local cores. Both worker counts run the same asset graph.

Results: benchmarks/results/scale.md (and .json): one section per mode, each from its latest run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from benchmarks.bench_incremental import build_corpus
from orchestration.celery_local import (
    celery_run_config,
    celery_workers,
    materialize_all,
    redis_server,
    step_spans,
    worker_names,
)
from retrieval.names import DEFAULT_CONFIG

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"


def write_configs(root: Path, docs_dir: Path, config_name: str, embedder: dict | None = None) -> None:
    """indexes.yaml (the one config, from configs/indexes.yaml, its `embedder:` replaced when given) and
    collections.yaml (`bench`) under root."""
    from retrieval.config import load_index_configs

    config = load_index_configs(REPO_ROOT / "configs" / "indexes.yaml")[config_name]
    # plain YAML types (the config's sections are read-only mappings)
    entry = json.loads(json.dumps({k: v for k, v in config.as_dict().items() if k != "name"}, default=dict))
    if embedder is not None:
        entry["embedder"] = embedder
    (root / "indexes.yaml").write_text(yaml.safe_dump({"indexes": {config_name: entry}}))
    collection = {"folders": [str(docs_dir)], "include": ["**/*.md"], "indexes": [config_name]}
    (root / "collections.yaml").write_text(yaml.safe_dump({"collections": {"bench": collection}}))


def copies(docs: list[Path], count: int) -> list[Path]:
    """`docs` and `count - 1` copies in folders `copy<c>/`, a larger first build of the same kind of text.

    Each copy tags every sentence end and line end with ` c<c>`, so its chunks have their own content
    hashes (an untagged copy would be served from the embedding cache, costing no requests).
    """
    out = list(docs)
    for c in range(2, count + 1):
        for path in docs:
            text = path.read_text(encoding="utf-8")
            tagged = re.sub(r"(?<=[.!?]) |\n", lambda m, c=c: f" c{c}{m.group(0)}", text)
            target = path.parent / f"copy{c}" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(tagged, encoding="utf-8")
            out.append(target)
    return out


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def new_database(server_url: str, name: str) -> str:
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


def measure(
    workers: int, root: Path, server_url: str, configs: Path, broker: str, extra_env: dict[str, str]
) -> dict[str, Any]:
    """One full index on `workers` Celery workers, in its own database and DAGSTER_HOME."""
    from dagster import DagsterInstance

    from orchestration.instance import create_dagster_schema, write_instance_yaml

    url = new_database(server_url, f"scale_{workers}")
    home = root / f"dagster-{workers}"
    create_dagster_schema(url)
    write_instance_yaml(home, url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHUNKYARD_CELERY_")}
    env.update(
        DAGSTER_HOME=str(home),
        DATABASE_URL=url,
        CHUNKYARD_HOME=str(root / f"home-{workers}"),
        CHUNKYARD_CONFIGS=str(configs),
        **extra_env,
    )
    with celery_workers(
        workers, broker=broker, env=env, workdir=root / f"workers-{workers}", prefix=f"w{workers}n"
    ) as started:
        load_before = uptime()
        print(f"[{workers} worker(s)] full index ... ({load_before})", flush=True)
        began = time.perf_counter()
        rc = materialize_all(celery_run_config(broker), env=env, log_path=root / f"run-{workers}.log")
        wall = time.perf_counter() - began
        load_after = uptime()
    if rc != 0:
        raise SystemExit(f"bench_scale: the {workers}-worker run failed; see {root / f'run-{workers}.log'}")
    instance = DagsterInstance.from_config(str(home))
    run = instance.get_runs(limit=1)[0]
    spans = step_spans(instance, run.run_id)
    names = worker_names(instance, run.run_id)
    stats = instance.get_run_stats(run.run_id)
    instance.dispose()
    began_run = stats.start_time or min((span.start for span in spans.values()), default=0.0)
    steps = {
        key.rsplit("__", 1)[-1]: {
            "seconds": round(span.end - span.start, 2),
            "start": round(span.start - began_run, 2),  # after the run's start: the gaps are hand-offs
            "worker": names.get(key, "?").split("@")[0],
        }
        for key, span in spans.items()
    }
    # the embedding phase: first embedding part's start to the `embeddings` step's end
    embedding = [span for key, span in spans.items() if "__embeddings" in key]
    embed_phase = max(s.end for s in embedding) - min(s.start for s in embedding) if embedding else 0.0
    print(f"  {wall:.1f} s", flush=True)
    return {
        "workers": workers,
        "wall_seconds": round(wall, 2),
        "run_seconds": round((stats.end_time or 0) - (stats.launch_time or stats.start_time or 0), 2),
        "embedding_phase_seconds": round(embed_phase, 2),
        "steps": steps,
        "load_before": load_before,
        "load_after": load_after,
        "worker_nodes": sorted(n.split("@")[0] for n in started.pids),
    }


def markdown(report: dict[str, Any]) -> str:
    runs = report["runs"]
    base = runs[0]["wall_seconds"]
    lines = [
        "# Scale-out: one vs two Celery workers (full index)",
        "",
        f"Collection: {report['documents']} documents ({report['corpus_chars']:,} characters) cut from the "
        f"Chroma benchmark corpora (bench_incremental's collection); index config `{report['config']}` "
        "(all-MiniLM-L6-v2). Each worker count on a fresh database of one embedded "
        f"{report.get('server', 'Postgres')}, a loopback "
        "redis-server 7 as broker and result backend, `dagster-celery worker start -A dagster_celery.app` "
        "workers with the solo pool (one process each), and one run of every asset by `dagster asset "
        "materialize` with the `celery` executor mode; the `embedding` pool limit is 1.",
        f"Machine: {report['machine']}. Measured {report['measured_at']} by `python -m benchmarks.bench_scale"
        f"{report['args']}` (`make bench-scale`), both worker counts in that one run.",
        "",
        "| workers | wall s (materialize process) | run s (Dagster) | speed-up vs 1 | load before | load after |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run['workers']} | {run['wall_seconds']:.1f} | {run['run_seconds']:.1f} | "
            f"{base / run['wall_seconds']:.2f}x | {run['load_before'].split('load average:')[-1].strip()} | "
            f"{run['load_after'].split('load average:')[-1].strip()} |"
        )
    lines += ["", "Seconds per step (STEP_START to STEP_SUCCESS) and the worker that ran it:", ""]
    lines += step_table(runs)
    lines += ["", "## Reading", "", report["reading"], ""]
    return "\n".join(lines)


def reading(runs: list[dict[str, Any]], docs: int) -> str:
    one, two = runs[0], runs[-1]
    ratio = one["wall_seconds"] / two["wall_seconds"]
    embed = one["steps"].get("embeddings", {}).get("seconds", 0.0)
    share = embed / one["wall_seconds"] if one["wall_seconds"] else 0.0
    size = (
        ""
        if docs == 1000
        else f" This run used {docs} documents, not 1,000 (`--docs`), to fit a shared CPU: the same text "
        "cut into fewer, larger documents."
    )
    return (
        f"Two workers took {two['wall_seconds']:.1f} s against {one['wall_seconds']:.1f} s for one: "
        f"a ratio of {ratio:.2f}x (one-worker time over two-worker time). Little gain was expected: the machine has "
        f"{os.cpu_count()} cores shared with other work, the model already uses both cores inside one "
        f"embedding step, and the embedding step is {share:.0%} of the one-worker run. "
        "A single index is a chain (documents -> chunks -> embeddings + bm25 -> index), so only bm25 "
        "can overlap the embedding step, and the `embedding` pool lets one model step run at a time "
        "across all workers. A second worker pays off with several indexes or collections and with "
        "workers on separate machines (docs/deployment.md), where each has its own cores; raise the "
        f"`embedding` pool limit there (`concurrency: pools:` in dagster.yaml).{size}" + noise(one, two)
    )


def noise(one: dict[str, Any], two: dict[str, Any]) -> str:
    """How much of the difference is the embedding step itself (same work in both runs: CPU load varying)."""
    embed_one = one["steps"].get("embeddings", {}).get("seconds", 0.0)
    embed_two = two["steps"].get("embeddings", {}).get("seconds", 0.0)
    gap = two["wall_seconds"] - one["wall_seconds"]  # > 0: two workers slower
    if not embed_one or not embed_two or not gap:
        return ""
    delta = embed_two - embed_one
    adjusted = one["wall_seconds"] / (two["wall_seconds"] - delta)
    slower = "slower" if gap > 0 else "faster"
    return (
        f" Two workers were {abs(gap):.1f} s {slower}; {delta:+.1f} s of that is the embedding step itself, "
        "which did the same work in both runs (same chunks, one model step at a time, on one worker): that "
        "part is the shared CPU's load changing between the runs, not the second worker. Without it the "
        f"ratio is {adjusted:.2f}x: on one index the second worker has only bm25 to run beside the "
        "embedding step, a second or two."
    )


def server_versions(url: str) -> str:
    """`PostgreSQL <version> + pgvector <version>` of the server at `url`."""
    import psycopg

    with psycopg.connect(url) as conn:
        version, vector = conn.execute(
            "SELECT current_setting('server_version'),"
            " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"
        ).fetchone()
    return f"PostgreSQL {version.split()[0]} + pgvector {vector}"


def markdown_endpoint(report: dict[str, Any]) -> str:
    runs = report["runs"]
    base, phase = runs[0]["wall_seconds"], runs[0]["embedding_phase_seconds"]
    lines = [
        "## Scale-out against an embedding server of fixed latency",
        "",
        f"Collection: {report['documents']} documents ({report['corpus_chars']:,} characters"
        + (
            f"; bench_incremental's collection {report['copies']} times over, each copy's sentence and line ends"
            " tagged ` c<k>` so that its chunks are its own"
            if report.get("copies", 1) > 1
            else ""
        )
        + f"), index config "
        f"`{report['config']}` with `embedder: {json.dumps(report['embedder'])}`: the fake OpenAI-compatible server "
        f"(tests/fake_embedding_server.py, its own process on loopback, {report['latency'] * 1000:.0f} ms per "
        f"request, {report['dimensions']} dimensions). `CHUNKYARD_EMBED_SHARDS={report['shards']}` in every run: the "
        f"embedding work is {report['shards']} `embeddings_part<k>` assets (content-hash shards, outside the "
        "`embedding` pool against a server), then `embeddings` stages the cached vectors. Otherwise as in the local-model section below "
        "(fresh database per worker count, redis broker, solo-pool `dagster-celery` workers, one "
        f"`dagster asset materialize` run). Machine: {report['machine']}. Measured {report['measured_at']} by "
        f"`python -m benchmarks.bench_scale{report['args']}`, both worker counts in that one run.",
        "",
        "| workers | wall s | run s (Dagster) | embedding phase s | speed-up, whole run (wall) |"
        " speed-up, embedding phase |"
        " load before | load after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run['workers']} | {run['wall_seconds']:.1f} | {run['run_seconds']:.1f} | "
            f"{run['embedding_phase_seconds']:.1f} | {base / run['wall_seconds']:.2f}x | "
            f"{phase / max(run['embedding_phase_seconds'], 1e-9):.2f}x | "
            f"{run['load_before'].split('load average:')[-1].strip()} | "
            f"{run['load_after'].split('load average:')[-1].strip()} |"
        )
    lines += ["", "Seconds per step and the worker that ran it:", ""]
    lines += step_table(runs)
    lines += ["", report.get("reading", ""), ""]
    if report.get("notes"):  # written by hand after the run (other runs, what was changed since)
        lines += [report["notes"], ""]
    return "\n".join(lines)


def step_table(runs: list[dict[str, Any]]) -> list[str]:
    """Seconds per step and the worker that ran it, one column per worker count."""
    lines = ["| step | " + " | ".join(f"{run['workers']} worker(s)" for run in runs) + " |"]
    lines.append("|---|" + "---|" * len(runs))
    for kind in sorted({k for run in runs for k in run["steps"]}):
        cells = []
        for run in runs:
            step = run["steps"].get(kind)
            cells.append(f"{step['seconds']:.2f} ({step['worker']})" if step else "-")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def compose(sections: dict[str, Any]) -> str:
    """scale.md: the endpoint section, then the local-model one, then the pipeline ceiling (each if run)."""
    parts = ["# Scale-out and the pipeline's ceiling", ""]
    if "endpoint" in sections:
        parts.append(markdown_endpoint(sections["endpoint"]))
    if "ceiling" in sections:  # rendered by bench_ceiling, which imports this module (not the reverse)
        parts.append(sections["ceiling"]["markdown"])
    for name in sorted(n for n in sections if n.startswith("publish")):  # rendered by bench_publish
        parts.append(sections[name]["markdown"])
    if "local" in sections:
        parts.append(markdown(sections["local"]).replace("# Scale-out: one", "## Local model: one", 1))
    return "\n".join(parts)


def load_sections(out: Path) -> dict[str, Any]:
    """The sections of the last runs (a flat report of an older run is the `local` section)."""
    path = out.with_suffix(".json")
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data if "runs" not in data else {"local": data}


def save_section(out: Path, name: str, report: dict[str, Any]) -> None:
    """Store one section's report beside the others and rewrite scale.md from them all."""
    sections = load_sections(out)
    sections[name] = report
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(sections, indent=2, sort_keys=True))
    out.write_text(compose(sections), encoding="utf-8")
    print(compose(sections))


def busy_seconds(run: dict[str, Any]) -> float:
    """Seconds of the run in which some step was running (the union of the steps' spans)."""
    spans = sorted((v["start"], v["start"] + v["seconds"]) for v in run["steps"].values())
    total, reach = 0.0, float("-inf")
    for begin, end in spans:
        total += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    return total


def endpoint_reading(runs: list[dict[str, Any]], latency: float) -> str:
    """What the runs show: the whole run's and the embedding phase's ratios, and where the time that a
    second worker cannot share went (the run's start, the hand-offs between steps, the chain of steps
    around the parts)."""
    one, two = runs[0], runs[-1]

    def parts(run: dict[str, Any]) -> list[float]:
        return [v["seconds"] for k, v in run["steps"].items() if k.startswith("embeddings_part")]

    phase = one["embedding_phase_seconds"] / max(two["embedding_phase_seconds"], 1e-9)
    whole = one["wall_seconds"] / two["wall_seconds"]
    mean_one, mean_two = sum(parts(one)) / len(parts(one)), sum(parts(two)) / len(parts(two))
    text = (
        f"Two workers ran the whole build {whole:.2f}x faster than one (wall time, the ratio the goal is "
        f"about) and its embedding phase (first part's start to the `embeddings` step's end) {phase:.2f}x. "
        f"**The goal of 1.7x for the whole run was {'met' if whole >= 1.7 else 'not met'}.** "
        f"The parts ran at once on two workers, {mean_two:.1f} s each on average against {mean_one:.1f} s one "
        f"after the other on one ({latency * 1000:.0f} ms waits on the server plus CPU work on the same 2 shared "
        "cores)."
    )
    if not all("start" in v for run in (one, two) for v in run["steps"].values()):
        return text  # an older run, without the steps' start times
    lines = []
    for run in (one, two):
        steps = run["steps"]
        chain = sum(v["seconds"] for k, v in steps.items() if not k.startswith("embeddings_part"))
        startup = run["wall_seconds"] - run["run_seconds"]
        idle = run["run_seconds"] - busy_seconds(run)
        lines.append((startup, idle, chain, sum(parts(run)) if run is one else max(parts(run))))
    (s1, i1, c1, p1), (s2, i2, c2, p2) = lines
    bm25 = two["steps"].get("bm25", {})
    beside = any(
        v["start"] < bm25.get("start", 0) + bm25.get("seconds", 0)
        and bm25.get("start", 0) < v["start"] + v["seconds"]
        for k, v in two["steps"].items()
        if k.startswith("embeddings_part")
    )
    return text + (
        f" Where the wall time went, one worker | two: the `dagster asset materialize` process before the run "
        f"started {s1:.1f} | {s2:.1f} s; no step running (hand-offs: the executor polls once a second for a "
        f"finished step, then a worker picks up and starts the next) {i1:.1f} | {i2:.1f} s; "
        f"the other steps (documents, chunks, bm25, embeddings, index) {c1:.1f} | {c2:.1f} s of step time; "
        f"the parts {p1:.1f} | {p2:.1f} s (their sum | the longer). bm25 ran "
        + ("beside a part on two workers" if beside else "on its own, not beside a part, on two workers")
        + ". Only the parts' time is shared by a second worker; the rest (the run's start, the hand-offs and "
        f"the chain documents -> chunks, then embeddings -> index) is not, {two['wall_seconds'] - p2:.1f} s of the "
        f"two-worker run. Had the parts halved exactly ({p1 / 2:.1f} s), the whole run would have been "
        f"{one['wall_seconds'] / (two['wall_seconds'] - p2 + p1 / 2):.2f}x."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.md")
    parser.add_argument(
        "--endpoint-latency", type=float, help="seconds per request of the fake embedding server"
    )
    parser.add_argument(
        "--shards", type=int, default=2, help="CHUNKYARD_EMBED_SHARDS with --endpoint-latency"
    )
    parser.add_argument(
        "--batch-size", type=int, default=16, help="texts per request with --endpoint-latency"
    )
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight per embedding part")
    parser.add_argument(
        "--copies", type=int, default=1, help="the collection this many times over, each copy's text its own"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="the fake server's port, redis-server's the next (0: any free ones)",
    )
    parser.add_argument(
        "--render", action="store_true", help="rewrite the .md from the .json of the last run (no new run)"
    )
    args = parser.parse_args(argv)
    if args.render:
        sections = load_sections(args.out)
        if "local" in sections:
            sections["local"]["reading"] = reading(sections["local"]["runs"], sections["local"]["documents"])
        if "endpoint" in sections:
            endpoint = sections["endpoint"]
            endpoint["reading"] = endpoint_reading(endpoint["runs"], endpoint["latency"])
        args.out.write_text(compose(sections), encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(sections, indent=2, sort_keys=True))
        print(compose(sections))
        return 0
    from retrieval.db import embedded_database_url

    extra_env: dict[str, str] = {}
    embedder = None
    server = None
    if args.endpoint_latency is not None:
        from benchmarks.bench_endpoint import fake_server

        server, url = fake_server(args.endpoint_latency, "fake-embed", args.port)
        embedder = {
            "backend": "openai",
            "url": url,
            "model": "fake-embed",
            "batch_size": args.batch_size,
            "concurrency": args.concurrency,
        }
        extra_env["CHUNKYARD_EMBED_SHARDS"] = str(args.shards)
    try:
        with tempfile.TemporaryDirectory(prefix="chunkyard-scale-") as tmp:
            root = Path(tmp)
            docs = copies(build_corpus(args.docs, root / "docs"), args.copies)
            corpus_chars = sum(len(p.read_text(encoding="utf-8")) for p in docs)
            write_configs(root, root / "docs", args.config, embedder)
            server_url = embedded_database_url(root / "pg")
            with redis_server(root / "redis", args.port + 1 if args.port else None) as broker:
                runs = [measure(n, root, server_url, root, broker, extra_env) for n in args.workers]
            versions = server_versions(server_url)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    flags = (
        ("" if args.docs == 1000 else f" --docs {args.docs}")
        + ("" if args.copies == 1 else f" --copies {args.copies}")
        + ("" if args.workers == [1, 2] else " --workers " + " ".join(map(str, args.workers)))
    )
    report = {
        "documents": len(docs),
        "corpus_chars": corpus_chars,
        "config": args.config,
        "server": versions,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": runs,
    }
    if embedder is None:
        report.update(args=flags, reading=reading(runs, len(docs)))
        save_section(args.out, "local", report)
        return 0
    flags += f" --endpoint-latency {args.endpoint_latency} --shards {args.shards}"
    flags += f" --batch-size {args.batch_size} --concurrency {args.concurrency}"
    report.update(
        args=flags,
        latency=args.endpoint_latency,
        copies=args.copies,
        shards=args.shards,
        dimensions=384,
        embedder={k: v for k, v in embedder.items() if k != "url"},
        reading=endpoint_reading(runs, args.endpoint_latency),
    )
    save_section(args.out, "endpoint", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
