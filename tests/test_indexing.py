"""Incremental staging and atomic publish, against real Postgres, the real model and real chunkers."""

from __future__ import annotations

import time

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.indexing.bm25 import stage_bm25
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.indexing.publish import publish
from chunkyard.retrieval.indexing.stage_reports import IndexingError
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.vectors import as_array

from tests.test_indexing_support import (
    ParagraphChunker,
    make_spec,
    publish_under_readers,
    random_unit_vector_for,
)

DOCS = {
    "guide.md": "# Guide\n\nchunkyard turns folders into indexes.\n\nEach index has its own HNSW graph.",
    "bm25.md": "BM25 scores come from postings stored in Postgres.\n\nThey equal rank-bm25 scores.",
    "deploy.md": "Deploy with docker compose.\n\nThe service answers POST /v1/search.",
}


def _docs(texts: dict[str, str]) -> list[Document]:
    return [Document(doc_id, text, metadata={"path": doc_id}) for doc_id, text in texts.items()]


def _stored_chunks(store: Store, index_name: str) -> list[tuple]:
    with store.connection() as conn:
        return conn.execute(
            'SELECT doc_id, start, "end", text FROM chunks WHERE index_name = %s ORDER BY doc_id, start',
            (index_name,),
        ).fetchall()


@pytest.mark.parametrize("strategy", ["token", "recursive"])
def test_build_index_with_the_real_chunker_stores_exact_spans(store, embedder, strategy) -> None:
    spec = IndexSpec(
        f"real-{strategy}",
        IndexConfig(
            name=f"{strategy}-12",
            chunker={"strategy": strategy, "size": 12, "overlap": 0, "tokenizer": "model"},
        ),
    )
    docs = _docs(DOCS)
    store.documents.sync(spec.collection, docs, [])
    report = build_index(store, spec, embedder)
    meta = report.as_metadata()
    assert meta["documents_added"] == 3 and meta["chunks_inserted"] == meta["chunks_total"] > 3
    assert meta["embeddings_computed"] + meta["embeddings_reused"] == meta["chunks_inserted"]
    assert all(isinstance(v, int | float | str) for v in meta.values())
    by_id = {d.id: d.text for d in docs}
    rows = _stored_chunks(store, spec.name)
    assert len(rows) == meta["chunks_total"]
    for doc_id, start, end, text in rows:
        assert by_id[doc_id][start:end] == text
    info = store.indexes.info(spec.name)
    assert info["version"] == 1 and info["dim"] == 384 and info["document_count"] == 3


def test_incremental_staging_embeds_only_what_changed(store, embedder) -> None:
    spec = make_spec()
    chunker = ParagraphChunker(spec.config.config_hash)
    texts = dict(DOCS)
    store.documents.sync(spec.collection, _docs(texts), [])
    first = build_index(store, spec, embedder, chunker=chunker)
    assert first.version == 1 and first.chunks_inserted == 7

    # nothing changed: zero embeddings computed, nothing published, the version stays
    sync = store.documents.sync(spec.collection, _docs(texts), [])
    assert sync.unchanged == sorted(texts) or sorted(sync.unchanged) == sorted(texts)
    stage = stage_chunks(store, spec, chunker=chunker)
    assert (stage.documents_unchanged, stage.chunks_staged, stage.chunks_kept) == (3, 0, 7)
    embed = stage_embeddings(store, spec, embedder)
    assert embed.embeddings_computed == 0
    stage_bm25(store, spec)
    again = publish(store, spec)
    assert again.version == 1 and not again.published

    # only a retrieval option changed (outside the config hash): republished under a new version
    reweighted = IndexSpec(
        spec.collection, IndexConfig(**{**spec.config.as_dict(), "hybrid": {"weight": 0.2}})
    )
    assert reweighted.config.config_hash == spec.config.config_hash
    stage_chunks(store, reweighted, chunker=chunker)
    stage_embeddings(store, reweighted, embedder)
    stage_bm25(store, reweighted)
    republished = publish(store, reweighted)
    assert republished.published and republished.version == 2 and republished.chunks_total == 7
    assert store.indexes.info(spec.name)["config"]["hybrid"]["weight"] == 0.2
    again = publish(store, reweighted)
    assert again.version == 2 and not again.published

    # one paragraph edited, one document deleted, one added
    texts["guide.md"] = texts["guide.md"].replace("its own HNSW graph", "its own partition")
    del texts["deploy.md"]
    texts["new.md"] = "A new document.\n\nchunkyard turns folders into indexes."  # 2nd paragraph is cached
    sync = store.documents.sync(spec.collection, _docs(texts), [])
    assert (sync.changed, sync.deleted, sync.added) == (["guide.md"], ["deploy.md"], ["new.md"])
    stage = stage_chunks(store, spec, chunker=chunker)
    assert (stage.documents_changed, stage.documents_deleted, stage.documents_added) == (1, 1, 1)
    assert (stage.chunks_staged, stage.chunks_to_delete, stage.chunks_kept) == (5, 5, 2)
    embed = stage_embeddings(store, spec, embedder)
    # guide.md: 2 of 3 paragraphs unchanged (cache), 1 new; new.md: 1 new, 1 identical to a cached text
    assert (embed.embeddings_computed, embed.embeddings_reused) == (2, 3)
    stage_bm25(store, spec)
    published = publish(store, spec)
    assert published.version == 3 and published.chunks_total == 7 and published.documents_total == 3
    assert {r[0] for r in _stored_chunks(store, spec.name)} == {"guide.md", "bm25.md", "new.md"}
    results = Searcher(store, embedder).search("partition", spec.name, k=1, mode="bm25")
    assert results[0].doc_id == "guide.md" and "partition" in results[0].text


def test_embedding_cache_is_shared_across_indexes(store, embedder) -> None:
    texts = {"x.md": "Shared paragraph one.\n\nShared paragraph two."}
    for name in ("cache-a", "cache-b"):
        spec = make_spec(collection="cache-shared", name=name)
        store.documents.sync(spec.collection, _docs(texts), [])
        report = build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
        if name == "cache-b":
            assert report.staged["embeddings_computed"] == 0 and report.staged["embeddings_reused"] == 2


def test_precomputed_vectors_are_stored_as_is(store, embedder) -> None:
    spec = make_spec()
    vector_for = random_unit_vector_for(seed_salt="late")
    store.documents.sync(spec.collection, _docs({"a.md": "late one\n\nlate two"}), [])
    report = build_index(
        store,
        spec,
        embedder,
        chunker=ParagraphChunker(spec.config.config_hash, vector_for=lambda t: 3 * vector_for(t)),
    )
    assert report.staged["embeddings_precomputed"] == 2 and report.staged["embeddings_computed"] == 0
    with store.connection() as conn, conn.cursor(binary=True) as cur:
        rows = cur.execute(
            "SELECT text, embedding FROM chunks WHERE index_name = %s", (spec.name,)
        ).fetchall()
    for text, vector in rows:
        np.testing.assert_allclose(as_array(vector), 3 * vector_for(text), rtol=1e-6)


def test_publish_refuses_incomplete_staging(store, embedder) -> None:
    spec = make_spec()
    store.documents.sync(spec.collection, _docs(DOCS), [])
    stage_chunks(store, spec, chunker=ParagraphChunker(spec.config.config_hash))
    with pytest.raises(IndexingError, match="stage_embeddings"):
        publish(store, spec)
    stage_embeddings(store, spec, embedder)
    with pytest.raises(IndexingError, match="stage_bm25"):
        publish(store, spec)
    assert store.indexes.info(spec.name)["version"] == 0  # nothing published, nothing lost
    stage_bm25(store, spec)
    assert publish(store, spec).version == 1


def test_config_change_rebuilds_everything(store, embedder) -> None:
    spec = make_spec(name="rebuild")
    store.documents.sync(spec.collection, _docs(DOCS), [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    changed = make_spec(collection=spec.collection, name="rebuild", bm25={"analyzer": "english"})
    assert changed.config.config_hash != spec.config.config_hash
    stage = stage_chunks(store, changed, chunker=ParagraphChunker(changed.config.config_hash))
    assert stage.full_rebuild and stage.documents_added == 3 and stage.chunks_to_delete == 7
    stage_embeddings(store, changed, embedder)
    stage_bm25(store, changed)
    report = publish(store, changed)
    assert report.version == 2 and report.chunks_total == 7 and report.chunks_deleted == 7
    assert store.indexes.info(spec.name)["config_hash"] == changed.config.config_hash


def test_readers_see_the_old_or_the_new_index_never_a_mix(store, embedder) -> None:
    """A reader hammering hybrid search while a full re-index publishes: every answer is one generation."""
    spec = make_spec(hybrid={"rrf_k": 60, "candidates": 400})
    n_docs, n_paragraphs = 40, 10

    def corpus(generation: str) -> list[Document]:
        return [
            Document(
                f"d{i:02d}",
                "\n\n".join(
                    f"generation {generation} document {i} paragraph {j}" for j in range(n_paragraphs)
                ),
            )
            for i in range(n_docs)
        ]

    vector_for = random_unit_vector_for()
    chunker = ParagraphChunker(spec.config.config_hash, vector_for=vector_for)
    store.documents.sync(spec.collection, corpus("alpha"), [])
    build_index(store, spec, embedder, chunker=chunker)

    store.documents.sync(spec.collection, corpus("beta"), [])
    stage_chunks(store, spec, chunker=chunker)
    stage_embeddings(store, spec, embedder)
    stage_bm25(store, spec)

    report = publish_under_readers(Searcher(store, embedder), spec.name, lambda: publish(store, spec))
    assert report.version == 2 and report.chunks_inserted == report.chunks_deleted == n_docs * n_paragraphs


def test_memory_bm25_reloads_when_the_version_moves(store, embedder) -> None:
    spec = make_spec()
    chunker = ParagraphChunker(spec.config.config_hash)
    texts = {"a.md": "apples and pears", "c.md": "plums", "d.md": "cherries", "e.md": "grapes"}
    store.documents.sync(spec.collection, _docs(texts), [])
    build_index(store, spec, embedder, chunker=chunker)
    searcher = Searcher(store, embedder, bm25_backend="memory")
    sql_searcher = Searcher(store, embedder, bm25_backend="sql")
    searcher.warm(spec.name)
    assert searcher.lexical.loaded(spec.name).version == 1
    assert [r.doc_id for r in searcher.search("pears", spec.name, mode="bm25")] == ["a.md"]
    store.documents.sync(spec.collection, _docs({**texts, "b.md": "pears pears pears"}), [])
    build_index(store, spec, embedder, chunker=chunker)
    stale = searcher.search("pears", spec.name, mode="bm25")  # answered from SQL while reloading
    deadline = time.time() + 30
    while searcher.lexical.loaded(spec.name).version != 2 and time.time() < deadline:
        time.sleep(0.05)
    assert searcher.lexical.loaded(spec.name).version == 2  # reloaded in the background
    memory = searcher.search("pears", spec.name, mode="bm25")
    in_sql = sql_searcher.search("pears", spec.name, mode="bm25")
    assert [r.chunk_id for r in stale] == [r.chunk_id for r in in_sql]
    assert [r.doc_id for r in memory] == [r.doc_id for r in in_sql] == ["b.md", "a.md"]
    assert [r.scores["bm25"] for r in memory] == pytest.approx([r.scores["bm25"] for r in in_sql], rel=1e-12)


def test_late_chunking_vectors_come_from_the_chunker(store, embedder) -> None:
    spec = IndexSpec(
        "late-test",
        IndexConfig(name="late", chunker={"strategy": "late", "size": 24, "tokenizer": "model"}),
    )
    store.documents.sync(spec.collection, _docs(DOCS), [])
    report = build_index(store, spec, embedder).as_metadata()
    assert report["chunks_total"] > 3
    assert report["embeddings_precomputed"] == report["chunks_total"] and report["embeddings_computed"] == 0
    results = Searcher(store, embedder).search("docker compose deployment", spec.name, k=1, mode="dense")
    assert results[0].doc_id == "deploy.md"


def test_vectors_wider_than_hnsw_allows_are_published_without_a_graph(store, embedder) -> None:
    spec = make_spec()
    store.documents.sync(spec.collection, _docs({"w.md": "wide one\n\nwide two"}), [])
    chunker = ParagraphChunker(spec.config.config_hash, vector_for=random_unit_vector_for(dim=2048))
    report = build_index(store, spec, embedder, chunker=chunker)
    assert report.published and not report.hnsw_built and report.chunks_total == 2
    assert store.indexes.info(spec.name)["dim"] == 2048


def test_a_publish_vacuums_the_tables_whose_dead_rows_autovacuum_has_not_cleared(
    store, embedder, monkeypatch
) -> None:
    from chunkyard.retrieval.indexing import publish as publishing
    from chunkyard.retrieval.store.indexes import partition_names

    spec = make_spec()
    chunker = ParagraphChunker(spec.config.config_hash)
    partition = partition_names(spec.name)["chunks"]

    def partition_stats() -> tuple[int, int]:
        with store.connection() as conn:
            return conn.execute(
                "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relid = to_regclass(%s)",
                (partition,),
            ).fetchone()

    def change_and_publish(text: str):
        texts["deploy.md"] = text
        store.documents.sync(spec.collection, _docs(texts), [])
        return build_index(store, spec, embedder, chunker=chunker)

    texts = dict(DOCS)
    store.documents.sync(spec.collection, _docs(texts), [])
    build_index(store, spec, embedder, chunker=chunker)
    change_and_publish("Deploy it elsewhere.\n\nThe service still answers POST /v1/search.")
    deadline = time.monotonic() + 30
    while partition_stats()[0] == 0:  # the statistics reach pg_stat_user_tables within about a second
        assert time.monotonic() < deadline, "the replaced chunks never showed up as dead rows"
        time.sleep(0.2)
    dead, vacuums = partition_stats()

    change_and_publish("Deploy it on a third host.\n\nIt answers there too.")
    assert partition_stats()[1] == vacuums, "a few dead rows (default thresholds) are left to autovacuum"

    monkeypatch.setattr(publishing, "VACUUM_MIN_DEAD", 1)
    report = change_and_publish("Deploy it on a fourth host.\n\nIt answers there as well.")
    assert report.tables_vacuumed >= 1
    assert partition_stats()[1] > vacuums, (dead, vacuums, partition_stats())
    hits = Searcher(store, embedder).search("fourth host", spec.name, k=1, mode="bm25")
    assert [(h.doc_id, h.text) for h in hits] == [("deploy.md", "Deploy it on a fourth host.")]


def test_a_bulk_publish_vacuums_the_staging_tables_and_a_small_one_does_not(
    store, embedder, monkeypatch
) -> None:
    from chunkyard.retrieval.indexing import publish as publishing
    from chunkyard.retrieval.store.migrations import STAGING_TABLES

    def vacuum_counts() -> dict[str, int]:
        with store.connection() as conn:
            rows = conn.execute(
                "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                (list(STAGING_TABLES),),
            ).fetchall()
        return dict(rows)

    spec = make_spec()
    chunker = ParagraphChunker(spec.config.config_hash)
    texts = dict(DOCS)
    store.documents.sync(spec.collection, _docs(texts), [])
    before = vacuum_counts()
    build_index(store, spec, embedder, chunker=chunker)  # 7 chunks: under the bulk threshold
    assert vacuum_counts() == before

    monkeypatch.setattr(publishing, "VACUUM_STAGING_CHUNKS", 2)  # this collection's "bulk"
    texts["deploy.md"] = "Deploy it elsewhere.\n\nThe service still answers POST /v1/search."
    store.documents.sync(spec.collection, _docs(texts), [])
    build_index(store, spec, embedder, chunker=chunker)  # 2 deleted + 2 inserted
    after = vacuum_counts()
    assert set(after) == set(STAGING_TABLES)
    assert all(after[t] > before.get(t, 0) for t in STAGING_TABLES), (before, after)
