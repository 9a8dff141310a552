"""The embedding work split into shards run by separate processes against an embedding server.

Real `python -c` processes each embed one shard (`embed_shard`) against the fake server on loopback;
`stage_embeddings` then stages the cached vectors and the index is published. The published vectors
equal those of one process building the same documents; a shard process killed with SIGKILL
mid-batch is re-run beside the other shard, and every distinct chunk text reaches the server once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from chunkyard.chunking.types import Document
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

from tests.conftest import REPO_ROOT
from tests.fake_embedding_server import FakeEmbeddingServer

CHILD = """
import sys
from chunkyard.retrieval.embedders.embedder import embedder_for_config
from chunkyard.retrieval.indexing.embed_shards import embed_shard
from chunkyard.retrieval.store import Store
from tests.test_embed_shards import spec

s = spec(sys.argv[2], sys.argv[3], sys.argv[4])
print(embed_shard(Store(sys.argv[1]), s, embedder_for_config(s.config), int(sys.argv[5]), 2), flush=True)
"""


def spec(collection: str, url: str, model: str) -> IndexSpec:
    config = IndexConfig(
        name="shards-32",
        chunker={"strategy": "token", "size": 32, "overlap": 0, "tokenizer": "model"},
        bm25={"analyzer": "english"},
        embedder={"backend": "openai", "url": url, "model": model, "batch_size": 4, "concurrency": 2},
    )
    return IndexSpec(collection, config)


def _shard(pg_url: str, target: IndexSpec, url: str, shard: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = [pg_url, target.collection, url, target.config.embedder["model"], str(shard)]
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, cwd=REPO_ROOT)


def _cached_hashes(store, target: IndexSpec) -> tuple[set[str], set[str]]:
    """(staged content hashes with a cached vector of the spec's model, staged content hashes)."""
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT s.content_hash, e.content_hash IS NOT NULL FROM (SELECT DISTINCT content_hash"
            " FROM staged_chunks WHERE index_name = %s) s LEFT JOIN embedding_cache e"
            " ON e.model_id = %s AND e.content_hash = s.content_hash",
            (str(target.name), f"openai:{target.config.embedder['model']}"),
        ).fetchall()
    return {h for h, cached in rows if cached}, {h for h, _ in rows}


def _published(store, target: IndexSpec) -> dict[str, str]:
    """(document, start) -> published vector, as text."""
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT doc_id || ':' || start, embedding::text FROM chunks WHERE index_name = %s",
            (str(target.name),),
        ).fetchall()
    return dict(rows)


def test_two_shard_processes_publish_one_processs_vectors_and_a_killed_shard_resumes(store, pg_url) -> None:
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import embedder_for_config
    from chunkyard.retrieval.embedders.endpoint_backend import forget_shared_endpoint_embedders
    from chunkyard.retrieval.indexing.bm25 import stage_bm25
    from chunkyard.retrieval.indexing.chunks import stage_chunks
    from chunkyard.retrieval.indexing.embed_shards import embed_shard, shard_of
    from chunkyard.retrieval.indexing.embeddings import stage_embeddings
    from chunkyard.retrieval.indexing.publish import publish

    run = uuid.uuid4().hex[:8]
    docs = [
        Document(f"d{i}.md", " ".join(f"w{run}{i}x{j}" for j in range(200)), metadata={"path": f"d{i}.md"})
        for i in range(6)
    ]
    one, split = f"shone{run}", f"shsplit{run}"
    targets: list[IndexSpec] = []
    try:
        # one process, its own server and model id (so the split build below shares no cache with it)
        with FakeEmbeddingServer(model="fake-one") as server:
            single = spec(one, server.url, "fake-one")
            targets.append(single)
            store.documents.sync(one, docs, [])
            assert build_index(store, single, embedder_for_config(single.config)).published == 1

        with FakeEmbeddingServer(hang_after=3) as server:
            target = spec(split, server.url, "fake-embed")
            targets.append(target)
            store.documents.sync(split, docs, [])
            stage_chunks(store, target, embedding_model=embedder_for_config(target.config))
            _, staged = _cached_hashes(store, target)
            part = {k: {h for h in staged if shard_of(h, 2) == k} for k in (0, 1)}
            assert part[0] and part[1]

            child = _shard(pg_url, target, server.url, 0)  # answered 3 requests, the rest hang
            try:
                deadline = time.monotonic() + 120
                while True:
                    assert child.poll() is None, "shard 0 finished (or failed) before it could be killed"
                    assert time.monotonic() < deadline, (server.requests, len(server.answered))
                    if server.requests > 3 and server.in_flight > 0:
                        cached, _ = _cached_hashes(store, target)
                        if len(cached) == len(server.answered) > 0:
                            break
                    time.sleep(0.05)
                os.kill(child.pid, signal.SIGKILL)
                assert child.wait(timeout=30) == -signal.SIGKILL
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            server.release()  # the hung requests answer 503 to nobody: none counts as answered
            cached, _ = _cached_hashes(store, target)
            assert cached and cached < part[0]  # killed mid-shard, only shard 0's texts embedded
            killed_run = sum(server.answered.values())

            children = [_shard(pg_url, target, server.url, k) for k in (0, 1)]  # re-run 0, beside 1
            assert [c.wait(timeout=180) for c in children] == [0, 0]
            assert max(server.answered.values()) == 1  # no chunk text embedded twice
            assert sum(server.answered.values()) == len(staged)
            assert sum(server.answered.values()) - killed_run == len(staged) - len(cached)

            embedder = embedder_for_config(target.config)
            # a shard re-run once the cache holds its texts asks the server for nothing
            again = embed_shard(store, target, embedder, 1, 2)
            assert (again.embeddings_computed, again.embeddings_cached_before) == (0, len(part[1]))
            report = stage_embeddings(store, target, embedder)
            assert report.embeddings_computed == 0  # every vector came from the shards
            assert sum(server.answered.values()) == len(staged)
            stage_bm25(store, target)
            assert publish(store, target).published == 1

        assert _published(store, target) == _published(store, single)
        assert len(_published(store, target)) >= len(staged)
    finally:
        for t in targets:
            store.indexes.drop(str(t.name))
        forget_shared_endpoint_embedders()


def test_dagster_runs_the_shards_as_assets_before_embeddings(tmp_path, monkeypatch, store, pg_url) -> None:
    from chunkyard.assets.definitions import build_definitions
    from dagster import instance_for_test, materialize

    from tests.dagster_helpers import INDEXES, materializations, unique_name, write_project

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CHUNKYARD_EMBED_SHARDS", "2")
    collection = unique_name("shd")
    with FakeEmbeddingServer() as server:
        remote = {"backend": "openai", "url": server.url, "model": server.model, "batch_size": 2}
        indexes = {
            "defaults": INDEXES["defaults"],
            "indexes": {"token-48": {**INDEXES["indexes"]["token-48"], "embedder": remote}},
        }
        question = {
            "id": "q1",
            "question": "Which words does BM25 score highly?",
            "references": [{"doc": "alpha.md", "text": "BM25 scores rare words such as zyxomorphic highly."}],
        }
        _, indexes_path, collections_path = write_project(
            tmp_path, collection, indexes=indexes, eval_set=[question]
        )
        defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
        with instance_for_test() as instance:
            result = materialize(list(defs.assets), instance=instance, resources=defs.resources)
        assert result.success
        done = materializations(result)
        prefix = f"{collection}/token_48"
        parts = [done[f"{prefix}/embeddings_part{k}"] for k in (0, 1)]
        assert all(p["embeddings_computed"] > 0 for p in parts)
        assert done[f"{prefix}/embeddings"]["embeddings_computed"] == 0  # the parts embedded everything
        chunk_texts = {t: n for t, n in server.answered.items() if t != question["question"]}
        assert sum(p["embeddings_computed"] for p in parts) == len(chunk_texts)
        assert max(chunk_texts.values()) == 1
        cost = store.evaluations.latest(f"{collection}/token-48")["cost"]  # the parts' usage adds up
        assert cost["endpoint_requests"] == sum(p["endpoint_requests"] for p in parts) > 0
    store.indexes.drop(f"{collection}/token-48")


def test_celery_sends_the_embedding_parts_before_bm25(monkeypatch) -> None:
    """dagster-celery sends ready steps in order of their priority tag (highest first, default 5): the
    parts go out before bm25, so two idle workers start both parts and bm25 follows one of them."""
    from chunkyard.assets.indexes import CELERY_PRIORITY_TAG, build_index_assets
    from dagster_celery.defaults import task_default_priority

    monkeypatch.setenv("CHUNKYARD_EMBED_SHARDS", "2")
    remote = {"backend": "openai", "url": "http://127.0.0.1:9/v1", "model": "m"}
    assets = build_index_assets(
        IndexSpec(
            "c",
            IndexConfig(name="priority", chunker={"strategy": "token", "size": 48}, embedder=remote),
        )
    )
    priority = {
        a.key.path[-1]: int(a.op.tags.get(CELERY_PRIORITY_TAG, task_default_priority)) for a in assets
    }
    # bm25 first: with equal priorities the order stays as sent (bench_scale saw bm25 go first)
    ready = ["bm25", "embeddings_part0", "embeddings_part1"]
    assert sorted(ready, key=lambda kind: -priority[kind]) == ["embeddings_part0", "embeddings_part1", "bm25"]
