"""The whole indexing graph on Celery workers (Redis broker on loopback) equals the multiprocess run.

Real processes throughout: redis-server, two `dagster-celery` workers, and each run launched by
`dagster asset materialize` in its own process, on the session's embedded Postgres (one
database per run). Skipped, with the reason, where Debian's redis-server is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pytest
import yaml
from chunkyard.orchestration.celery_local import (
    celery_run_config,
    celery_workers,
    materialize_all,
    redis_server,
    redis_server_binary,
    step_spans,
    worker_names,
)

from tests.dagster_helpers import DOCS, INDEXES

REPO_ROOT = Path(__file__).resolve().parent.parent
COLLECTION = "scaled"
CONFIGS = ("token-48", "recursive-48")
QUESTIONS = [
    {
        "id": "q1",
        "question": "Which words does BM25 score highly?",
        "references": [{"doc": "alpha.md", "text": "BM25 scores rare words such as zyxomorphic highly."}],
    },
    {
        "id": "q2",
        "question": "How does the sensor notice changes?",
        "references": [{"doc": "beta.md", "text": "The sensor hashes file contents to notice changes."}],
    },
    {
        "id": "q3",
        "question": "Do readers ever see half an index?",
        "references": [{"doc": "beta.md", "text": "readers never see half an index"}],
    },
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        redis_server_binary() is None,
        reason="redis-server not installed (Debian package redis-server; .ci/run installs it as root): "
        "the Celery executor test needs a Redis broker",
    ),
]


def write_collection(root: Path) -> Path:
    """A configs folder (indexes.yaml, collections.yaml) + documents + questions under root; returns that folder."""
    docs = root / "docs"
    docs.mkdir(parents=True)
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    # A real project document too, so each embedding step has some work (a hundred-odd chunks).
    shutil.copy(REPO_ROOT / "docs" / "architecture.md", docs / "architecture.md")
    questions = root / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    collection = {
        "folders": [str(docs)],
        "include": ["**/*"],
        "indexes": list(CONFIGS),
        "eval_set": str(questions),
    }
    (root / "indexes.yaml").write_text(yaml.safe_dump(INDEXES))
    (root / "collections.yaml").write_text(yaml.safe_dump({"collections": {COLLECTION: collection}}))
    return root


def database(pg_url: str, name: str) -> str:
    """A new database on the session's server; its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(urlsplit(pg_url)._replace(path=f"/{name}"))


def run_environment(root: Path, url: str, configs_dir: Path) -> dict[str, str]:
    """DAGSTER_HOME (dagster.yaml on `url`), DATABASE_URL and the configs folder: what every process of a run reads."""
    from chunkyard.orchestration.instance import create_dagster_schema, write_instance_yaml

    home = root / "dagster"
    create_dagster_schema(url)
    write_instance_yaml(home, url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHUNKYARD_CELERY_")}
    env.update(
        DAGSTER_HOME=str(home),
        DATABASE_URL=url,
        CHUNKYARD_HOME=str(root / "home"),
        CHUNKYARD_CONFIGS=str(configs_dir),
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p),
    )
    return env


def latest_run(home: str):
    """(instance, the run) of the only run in that DAGSTER_HOME."""
    from dagster import DagsterInstance

    instance = DagsterInstance.from_config(home)
    runs = instance.get_runs(limit=1)
    assert runs, f"no run recorded under {home}"
    return instance, runs[0]


def index_rows(url: str, index: str) -> tuple[list[str], np.ndarray]:
    from chunkyard.retrieval.store.db import connect

    with connect(url) as conn:
        rows = conn.execute(
            "SELECT chunk_id, embedding FROM chunks WHERE index_name = %s ORDER BY chunk_id", (index,)
        ).fetchall()
    return [r[0] for r in rows], np.array([r[1].to_numpy() for r in rows], dtype=np.float32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> dict:
    """One Celery run (two workers) and one multiprocess run of the same collection, each in its own database."""
    root = tmp_path_factory.mktemp("celery")
    configs_dir = write_collection(root / "project")
    out: dict = {}
    with redis_server(root / "redis") as broker:
        env = run_environment(root / "celery", database(pg_url, "celery_run"), configs_dir)
        with celery_workers(2, broker=broker, env=env, workdir=root / "workers") as workers:
            rc = materialize_all(
                celery_run_config(broker), env=env, log_path=root / "celery-run.log", timeout=600
            )
            worker_log = workers.log_text()
        instance, run = latest_run(env["DAGSTER_HOME"])
        out["celery"] = {
            "rc": rc,
            "log": (root / "celery-run.log").read_text(errors="replace"),
            "env": env,
            "run": run,
            "spans": step_spans(instance, run.run_id),
            "workers": worker_names(instance, run.run_id),
            "worker_pids": workers.pids,
            "worker_log": worker_log,
            "pool_limit": instance.event_log_storage.get_concurrency_info("embedding").slot_count,
        }
        instance.dispose()
    env = run_environment(root / "multiprocess", database(pg_url, "multiprocess_run"), configs_dir)
    rc = materialize_all(
        {"execution": {"config": {"multiprocess": {}}}}, env=env, log_path=root / "mp-run.log", timeout=600
    )
    instance, run = latest_run(env["DAGSTER_HOME"])
    out["multiprocess"] = {"rc": rc, "env": env, "run": run, "spans": step_spans(instance, run.run_id)}
    instance.dispose()
    return out


def test_celery_run_succeeds_with_every_step_in_a_worker_process(runs: dict) -> None:
    celery = runs["celery"]
    assert celery["rc"] == 0, celery["log"][-4000:]
    assert celery["run"].is_success, celery["log"][-4000:]
    spans = celery["spans"]
    kinds = {key.rsplit("__", 1)[-1] for key in spans}
    assert kinds >= {"documents", "chunks", "embeddings", "bm25", "publish", "evaluation", "leaderboard"}
    assert all(span.succeeded for span in spans.values())
    # Every step's events come from a worker's process (solo pool: the worker runs its task itself),
    # never from the run's own process; both workers took steps.
    worker_pids = set(celery["worker_pids"].values())
    assert {span.pid for span in spans.values()} <= worker_pids, (spans, celery["worker_pids"])
    assert set(celery["workers"]) == set(spans)
    assert set(celery["workers"].values()) == set(celery["worker_pids"])
    assert "execute_plan" in celery["worker_log"] and "succeeded" in celery["worker_log"]


def test_celery_and_multiprocess_runs_build_the_same_index(runs: dict) -> None:
    from chunkyard.evaluation.runner import latest_reports
    from chunkyard.retrieval.store import Store

    assert runs["multiprocess"]["rc"] == 0 and runs["multiprocess"]["run"].is_success
    mp_pids = {span.pid for span in runs["multiprocess"]["spans"].values()}
    assert not mp_pids & set(runs["celery"]["worker_pids"].values())
    celery_url = runs["celery"]["env"]["DATABASE_URL"]
    mp_url = runs["multiprocess"]["env"]["DATABASE_URL"]
    names = [f"{COLLECTION}/{config}" for config in CONFIGS]
    for name in names:
        celery_ids, celery_vectors = index_rows(celery_url, name)
        mp_ids, mp_vectors = index_rows(mp_url, name)
        assert celery_ids and celery_ids == mp_ids
        assert celery_vectors.shape == mp_vectors.shape == (len(celery_ids), 384)
        # The same texts, embedded in other batches by other processes: equal up to float32 noise.
        np.testing.assert_allclose(celery_vectors, mp_vectors, rtol=0, atol=1e-6)
    celery_reports = latest_reports(Store(celery_url), names)
    mp_reports = latest_reports(Store(mp_url), names)
    assert len(celery_reports) == len(mp_reports) == len(names)
    for ours, theirs in zip(celery_reports, mp_reports, strict=True):
        assert ours.quality() == theirs.quality()
        assert ours.headline()["cost/chunks"] == theirs.headline()["cost/chunks"]
        assert ours.quality()  # numbers were measured


def test_embedding_pool_holds_across_workers(runs: dict) -> None:
    celery = runs["celery"]
    assert celery["pool_limit"] == 1
    embeddings = sorted(
        (span for key, span in celery["spans"].items() if key.endswith("__embeddings")), key=lambda s: s.start
    )
    assert len(embeddings) == len(CONFIGS)
    first, second = embeddings
    # The second embedding step was ready (its chunks staged) while the first still ran, and the
    # other worker was free, yet it started only after the first finished: the pool held it back.
    chunks = celery["spans"][second.step_key.replace("__embeddings", "__chunks")]
    assert chunks.end < first.end, (chunks, first)
    assert second.start >= first.end, (first, second)
