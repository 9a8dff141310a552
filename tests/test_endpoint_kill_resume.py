"""kill -9 mid-build against an embedding server, then resume: no chunk text is embedded twice.

A real `python -c` process builds an index whose embedder is the fake server on loopback. The server
answers a few requests, then hangs every later one; once the answered texts are all in the embedding
cache (each answer is cached as it arrives), the process gets SIGKILL with requests in flight. The
resumed build asks the server only for the texts it never answered: across both runs, every distinct
chunk text is answered exactly once (counted at the server), and the index is published whole.
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
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.store import Store
from tests.test_endpoint_kill_resume import spec

s = spec(sys.argv[2], sys.argv[3])
build_index(Store(sys.argv[1]), s, embedder_for_config(s.config))
print("finished", flush=True)
"""


def spec(collection: str, url: str) -> IndexSpec:
    config = IndexConfig(
        name="kill-endpoint-32",
        chunker={"strategy": "token", "size": 32, "overlap": 0, "tokenizer": "model"},
        bm25={"analyzer": "english"},
        embedder={"backend": "openai", "url": url, "model": "fake-embed", "batch_size": 4, "concurrency": 3},
    )
    return IndexSpec(collection, config)


def _cached(store, index_name: str) -> tuple[int, int]:
    """(staged content hashes with a cached vector, staged content hashes)."""
    with store.connection() as conn:
        return conn.execute(
            "SELECT count(e.content_hash), count(*) FROM (SELECT DISTINCT content_hash FROM staged_chunks"
            " WHERE index_name = %s) s LEFT JOIN embedding_cache e"
            " ON e.model_id = 'openai:fake-embed' AND e.content_hash = s.content_hash",
            (index_name,),
        ).fetchone()


def test_kill_9_mid_build_then_resume_embeds_no_chunk_twice(store, pg_url: str) -> None:
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import embedder_for_config
    from chunkyard.retrieval.embedders.endpoint_backend import forget_shared_endpoint_embedders

    run = uuid.uuid4().hex[:8]
    docs = [
        Document(f"d{i}.md", " ".join(f"w{run}{i}x{j}" for j in range(200)), metadata={"path": f"d{i}.md"})
        for i in range(6)
    ]
    collection = f"killep{run}"
    with FakeEmbeddingServer(hang_after=5) as server:
        target = spec(collection, server.url)
        store.documents.sync(collection, docs, [])
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, pg_url, collection, server.url], env=env, cwd=REPO_ROOT
        )
        try:
            deadline = time.monotonic() + 120
            while True:  # answered 5 requests, others hang in flight, and the answers are cached
                assert child.poll() is None, "the build finished (or failed) before it could be killed"
                assert time.monotonic() < deadline, (server.requests, len(server.answered))
                if server.requests > 5 and server.in_flight > 0:
                    cached, total = _cached(store, str(target.name))
                    if cached == len(server.answered) > 0:
                        break
                time.sleep(0.05)
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        server.release()  # the hung requests answer 503 to nobody; none of them counts as answered
        cached, total = _cached(store, str(target.name))
        assert 0 < cached < total, (cached, total)  # killed mid-embedding
        first_run = sum(server.answered.values())
        assert first_run == cached

        try:
            report = build_index(store, target, embedder_for_config(target.config)).as_metadata()
            assert report["published"] == 1
            assert max(server.answered.values()) == 1  # no text was embedded twice
            assert sum(server.answered.values()) == total  # each distinct text once, across both runs
            assert sum(server.answered.values()) - first_run == total - cached
            with store.connection() as conn:
                chunks, missing = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE embedding IS NULL) FROM chunks"
                    " WHERE index_name = %s",
                    (str(target.name),),
                ).fetchone()
            assert chunks >= total and missing == 0
        finally:
            store.indexes.drop(str(target.name))
            forget_shared_endpoint_embedders()
