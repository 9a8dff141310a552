"""kill -9 mid-embedding, then resume: the published index equals a fresh build, nothing leaks.

A real `python -c` process runs `retrieval.build_index` on a corpus big enough to embed
for several seconds; once the embedding cache holds some of its vectors (the first batches are
written) it gets SIGKILL. Rerunning build_index resumes from the cache, and the published index is
checked row by row against a fresh build of the same documents in another collection: chunk ids
and spans (text == document[start:end]), one vector per chunk (equal to the fresh build's),
postings, document frequencies and BM25 stats; no staging rows are left over.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid

from chunkyard.chunking.types import Document
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store.migrations import STAGING_TABLES

from tests.conftest import REPO_ROOT

CONFIG = IndexConfig(
    name="kill-token-48",
    chunker={"strategy": "token", "size": 48, "overlap": 0, "tokenizer": "model"},
    bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"},
)
N_DOCS, WORDS_PER_DOC = 24, 1000

CHILD = """
import sys
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.store import Store
from tests.test_kill_resume import CONFIG
from chunkyard.retrieval.settings.config import IndexSpec

build_index(Store(sys.argv[1]), IndexSpec(sys.argv[2], CONFIG), load_embedder("all-MiniLM-L6-v2"))
print("finished", flush=True)
"""


def corpus(seed: int) -> list[Document]:
    """Prose-like documents of random words (unique per seed: nothing is in the cache yet)."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10)))
        for _ in range(3000)
    ]
    docs = []
    for i in range(N_DOCS):
        words = [rng.choice(vocabulary) for _ in range(WORDS_PER_DOC)]
        paragraphs = [" ".join(words[j : j + 120]) + "." for j in range(0, len(words), 120)]
        docs.append(
            Document(f"doc{i:03d}.txt", "\n\n".join(paragraphs), metadata={"path": f"doc{i:03d}.txt"})
        )
    return docs


def _cached(store, index_name: str, model_id: str) -> tuple[int, int]:
    """(staged content hashes with a cached vector, staged content hashes)."""
    with store.connection() as conn:
        return conn.execute(
            "SELECT count(e.content_hash), count(*) FROM (SELECT DISTINCT content_hash FROM staged_chunks"
            " WHERE index_name = %s) s LEFT JOIN embedding_cache e"
            " ON e.model_id = %s AND e.content_hash = s.content_hash",
            (index_name, model_id),
        ).fetchone()


def _rows(store, sql: str, index_name: str) -> list[tuple]:
    with store.connection() as conn:
        return conn.execute(sql, (index_name,)).fetchall()


def test_kill_9_mid_embedding_then_resume_publishes_a_consistent_index(store, embedder, pg_url: str) -> None:
    from chunkyard.pipeline.graph import build_index

    collection = f"kill{uuid.uuid4().hex[:8]}"
    spec = IndexSpec(collection, CONFIG)
    docs = corpus(seed=int(uuid.uuid4().int % 10**6))
    store.documents.sync(collection, docs, [])

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, pg_url, collection], env=env, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert child.poll() is None, "build_index finished (or failed) before it could be killed"
            assert time.monotonic() < deadline, "no embedding was written within 240 s"
            cached, total = _cached(store, spec.name, embedder.model_id)
            if cached > 0:
                break
            time.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    cached, total = _cached(store, spec.name, embedder.model_id)
    assert 0 < cached < total, (cached, total)  # killed mid-embedding
    published = "SELECT count(*) FROM chunks WHERE index_name = %s"
    assert _rows(store, published, spec.name) == [(0,)]  # nothing was published

    report = build_index(store, spec, embedder).as_metadata()  # resume
    assert report["embeddings_reused"] >= cached  # what the killed run embedded is not embedded again
    assert report["embeddings_computed"] <= total - cached

    fresh_collection = f"fresh{uuid.uuid4().hex[:8]}"
    fresh = IndexSpec(fresh_collection, CONFIG)
    store.documents.sync(fresh_collection, docs, [])
    fresh_report = build_index(store, fresh, embedder).as_metadata()
    assert fresh_report["embeddings_computed"] == 0  # every vector comes from the cache now

    chunks_sql = (
        'SELECT chunk_id, doc_id, start, "end", text, content_hash, embedding::text FROM chunks'
        " WHERE index_name = %s ORDER BY chunk_id"
    )
    resumed, expected = _rows(store, chunks_sql, spec.name), _rows(store, chunks_sql, fresh.name)
    assert len(resumed) == len(expected) >= 500
    # `total` counts distinct texts: two documents may end in the same short tail (one vector each).
    assert len({r[5] for r in resumed}) == total
    assert resumed == expected  # ids, spans, texts, hashes and vectors
    assert len({r[0] for r in resumed}) == len(resumed)
    by_id = {d.id: d.text for d in docs}
    assert all(by_id[doc][start:end] == text for _, doc, start, end, text, _, _ in resumed)
    assert all(r[6] is not None for r in resumed)
    with store.connection() as conn:
        dims = conn.execute(
            "SELECT DISTINCT vector_dims(embedding) FROM chunks WHERE index_name = %s", (spec.name,)
        ).fetchall()
    assert dims == [(embedder.dim,)]

    postings = (
        "SELECT term, chunk_id, tf, doc_len FROM bm25_postings WHERE index_name = %s ORDER BY term, chunk_id"
    )
    assert _rows(store, postings, spec.name) == _rows(store, postings, fresh.name)
    terms = "SELECT term, df FROM bm25_terms WHERE index_name = %s ORDER BY term"
    assert _rows(store, terms, spec.name) == _rows(store, terms, fresh.name) != []
    stats = "SELECT n_docs, total_length, vocab_size, round(idf_sum::numeric, 6) FROM bm25_stats WHERE index_name = %s"
    assert _rows(store, stats, spec.name) == _rows(store, stats, fresh.name)

    with store.connection() as conn:
        for table in STAGING_TABLES:
            left = conn.execute(
                f"SELECT count(*) FROM {table} WHERE index_name = %s", (spec.name,)
            ).fetchone()[0]
            assert left == 0, f"{table}: {left} staging rows left over"
