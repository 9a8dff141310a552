"""One writer per index: two runs of one collection with a change between them never publish a chunk
whose vector is another text's embedding.

The earlier run embeds while the document changes and a later run re-stages the index (the issue's
AARDVARK -> BUFFALOS reproduction, made deterministic: the later run's documents sync and chunk stage
run from inside the earlier run's model call). The earlier run stops at its next write; the later
one publishes; every published vector equals its own text's cached embedding.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.retrieval.indexing.bm25 import stage_bm25
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.indexing.publish import publish
from chunkyard.retrieval.indexing.stage_reports import IndexingError
from chunkyard.retrieval.indexing.staging import StagingTakenOver
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

CONFIG = IndexConfig(
    name="writer-token-48",
    chunker={"strategy": "token", "size": 48, "overlap": 0, "tokenizer": "model"},
    bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"},
)
FILLER = "Other documents talk about Postgres, vectors and the rest of the pipeline. " * 3


def _docs(animal: str, tag: str) -> list[Document]:
    """The collection; `tag` makes the secret's text new to the embedding cache (so it is embedded)."""
    return [
        Document("secret.md", f"The secret animal of {tag} is {animal}.", metadata={"path": "secret.md"}),
        *[Document(f"d{i}.md", f"{FILLER} Number {i}.", metadata={"path": f"d{i}.md"}) for i in range(5)],
    ]


class CompetingRun:
    """The real embedder; its first call first lets another run sync a change and re-stage the index."""

    def __init__(self, embedder, competitor) -> None:
        self._embedder = embedder
        self._competitor = competitor

    def __getattr__(self, name: str):
        return getattr(self._embedder, name)

    def embed(self, texts: list[str]) -> np.ndarray:
        if self._competitor is not None:
            competitor, self._competitor = self._competitor, None
            competitor()
        return self._embedder.embed(texts)


def _mismatched(store, index_name: str, model_id: str) -> int:
    """Published chunks whose vector is not their text's embedding (the issue's query, per index)."""
    with store.connection() as conn:
        return conn.execute(
            "SELECT count(*) FROM chunks c WHERE c.index_name = %s AND NOT EXISTS (SELECT 1 FROM"
            " embedding_cache e WHERE e.model_id = %s AND e.content_hash = c.content_hash"
            " AND e.embedding = c.embedding)",
            (index_name, model_id),
        ).fetchone()[0]


def test_two_runs_with_a_change_between_them_publish_only_matching_vectors(store, embedder) -> None:
    collection = f"w{uuid.uuid4().hex[:8]}"
    spec = IndexSpec(collection, CONFIG)
    # published once with a third animal, so both runs below are one-document updates
    store.documents.sync(collection, _docs("OKAPI", collection))
    stage_chunks(store, spec, owner="run-0")
    stage_embeddings(store, spec, embedder, owner="run-0")
    stage_bm25(store, spec, owner="run-0")
    publish(store, spec, owner="run-0")

    store.documents.sync(collection, _docs("AARDVARK", collection))  # run 1: documents step
    stage_chunks(store, spec, owner="run-1")

    def run_2_stages_the_next_edit() -> None:
        store.documents.sync(collection, _docs("BUFFALOS", collection))  # same length: same chunk ids
        stage_chunks(store, spec, owner="run-2")

    with pytest.raises(StagingTakenOver, match="run-2"):
        stage_embeddings(store, spec, CompetingRun(embedder, run_2_stages_the_next_edit), owner="run-1")
    for step in (lambda: stage_bm25(store, spec, owner="run-1"), lambda: publish(store, spec, owner="run-1")):
        with pytest.raises(StagingTakenOver):
            step()
    stage_embeddings(store, spec, embedder, owner="run-2")
    stage_bm25(store, spec, owner="run-2")
    report = publish(store, spec, owner="run-2")
    assert report.published and report.vectors_checked >= 1
    with pytest.raises(StagingTakenOver):  # run 1 cannot publish after run 2 either
        publish(store, spec, owner="run-1")

    with store.connection() as conn:
        texts = [t for (t,) in conn.execute("SELECT text FROM chunks WHERE index_name = %s", (spec.name,))]
    assert any("BUFFALOS" in t for t in texts) and not any("AARDVARK" in t for t in texts)
    assert _mismatched(store, spec.name, embedder.model_id) == 0


def test_publish_refuses_a_staged_vector_that_is_not_its_texts_embedding(store, embedder) -> None:
    collection = f"w{uuid.uuid4().hex[:8]}"
    spec = IndexSpec(collection, CONFIG)
    store.documents.sync(collection, _docs("OKAPI", collection))
    stage_chunks(store, spec)
    stage_embeddings(store, spec, embedder)
    stage_bm25(store, spec)
    with store.connection() as conn:  # two runs' stages crossed: one chunk carries another's vector
        conn.execute(
            "UPDATE staged_embeddings e SET embedding = (SELECT x.embedding FROM staged_embeddings x"
            " JOIN staged_chunks s USING (index_name, chunk_id) WHERE x.index_name = %s AND s.doc_id <> 'secret.md'"
            " LIMIT 1) FROM staged_chunks s WHERE s.index_name = e.index_name AND s.chunk_id = e.chunk_id"
            " AND e.index_name = %s AND s.doc_id = 'secret.md'",
            (spec.name, spec.name),
        )
    with pytest.raises(IndexingError, match="not the embedding of their chunk's text"):
        publish(store, spec)
    assert store.indexes.version(spec.name) == 0
