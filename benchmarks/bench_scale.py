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
from chunkyard.orchestration.celery_local import (
    celery_run_config,
    celery_workers,
    materialize_all,
    redis_server,
    step_spans,
    worker_names,
)
from chunkyard.retrieval.settings.names import DEFAULT_CONFIG

from benchmarks.bench_incremental import build_corpus
from benchmarks.scale_report import (
    RESULTS,
    compose,
    endpoint_reading,
    endpoint_section,
    load_sections,
    reading,
    save_section,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def write_configs(root: Path, docs_dir: Path, config_name: str, embedder: dict | None = None) -> None:
    """indexes.yaml (the one config, from configs/indexes.yaml, its `embedder:` replaced when given) and
    collections.yaml (`bench`) under root."""
    from chunkyard.retrieval.settings.config import load_index_configs

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
    from chunkyard.orchestration.instance import create_dagster_schema, write_instance_yaml
    from dagster import DagsterInstance

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


def server_versions(url: str) -> str:
    """`PostgreSQL <version> + pgvector <version>` of the server at `url`."""
    import psycopg

    with psycopg.connect(url) as conn:
        version, vector = conn.execute(
            "SELECT current_setting('server_version'),"
            " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"
        ).fetchone()
    return f"PostgreSQL {version.split()[0]} + pgvector {vector}"


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
        for name in (n for n in sections if n.startswith("endpoint")):
            endpoint = sections[name]
            endpoint["reading"] = endpoint_reading(endpoint["runs"], endpoint["latency"])
        args.out.write_text(compose(sections), encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(sections, indent=2, sort_keys=True))
        print(compose(sections))
        return 0
    from chunkyard.retrieval.store.db import embedded_database_url

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
    save_section(args.out, endpoint_section(args.endpoint_latency), report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
