"""Search against real Postgres and the real model: exactness, partitions, filters, hybrid, rerank."""

from __future__ import annotations

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import IndexNotFoundError, Searcher, SearchError
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.indexes import partition_names
from chunkyard.retrieval.store.vectors import as_array

from tests.test_indexing_support import ParagraphChunker, make_spec, random_unit_vector_for

TOPICS = [
    "The feline rested upon the rug near the fireplace all afternoon.",
    "Kubernetes schedules containers onto nodes and restarts failed pods.",
    "XQ_frobnicate_77 returns the pending depth of the ingestion queue.",
    "Photosynthesis converts sunlight, water and carbon dioxide into sugar.",
    "The stock market fell sharply after the central bank raised interest rates.",
    "A good sourdough needs a lively starter, flour, water and patience.",
    "Marathon runners train for months to build endurance and speed.",
    "Volcanoes erupt when magma rises through cracks in the earth's crust.",
    "The violinist tuned her instrument before the concert began.",
    "Glaciers carve valleys as they slowly move downhill over centuries.",
    "Postgres uses write-ahead logging to recover after a crash.",
    "Honeybees communicate the location of flowers with a waggle dance.",
]


@pytest.fixture(scope="module")
def text_index(store: Store, embedder):
    """Real MiniLM vectors: three documents of four paragraphs each; English BM25 analyzer."""
    spec = make_spec(bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"})
    docs = [
        Document(
            f"doc{i}",
            "\n\n".join(TOPICS[i * 4 : i * 4 + 4]),
            metadata={"group": "even" if i % 2 == 0 else "odd"},
        )
        for i in range(3)
    ]
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec


@pytest.fixture(scope="module")
def searcher(store: Store, embedder) -> Searcher:
    return Searcher(store, embedder)


def _vectors(store: Store, spec) -> dict[str, np.ndarray]:
    with store.connection() as conn, conn.cursor(binary=True) as cur:
        rows = cur.execute(
            "SELECT chunk_id, embedding FROM chunks WHERE index_name = %s", (spec.name,)
        ).fetchall()
    return {cid: as_array(v) for cid, v in rows}


def _exact(store: Store, spec, qvec: np.ndarray, k: int, allowed: set[str] | None = None) -> list[str]:
    vectors = _vectors(store, spec)
    ids = [c for c in vectors if allowed is None or c in allowed]
    sims = np.array([float(vectors[c] @ qvec / np.linalg.norm(vectors[c])) for c in ids])
    order = np.argsort(-sims, kind="stable")[:k]
    return [ids[i] for i in order]


def test_dense_equals_exact_search_on_a_small_index(store, text_index, searcher, embedder) -> None:
    """At most EXACT_MAX_CHUNKS chunks: every vector is compared, even at a small ef_search."""
    for query in ("a cat sleeping on a carpet", "how do databases survive crashes", "bread baking"):
        qvec = embedder.embed([query])[0]
        got = [r.chunk_id for r in searcher.search(query, text_index.name, k=5, mode="dense", ef_search=5)]
        assert got == _exact(store, text_index, qvec, 5)


def test_results_carry_exact_spans_scores_and_timings(store, text_index, searcher) -> None:
    docs = {d.id: d for d in store.documents.read(text_index.collection)}
    results = searcher.search("volcano eruption magma", text_index.name, k=3, mode="hybrid")
    assert [r.rank for r in results] == [1, 2, 3]
    for r in results:
        assert docs[r.doc_id].text[r.start : r.end] == r.text
        assert {"dense", "rrf"} <= set(r.scores) or {"bm25", "rrf"} <= set(r.scores)
        assert r.timings["total_ms"] > 0 and "dense_ms" in r.timings and "bm25_ms" in r.timings
    assert "magma" in results[0].text


def test_hybrid_finds_what_only_bm25_can_match(text_index, searcher) -> None:
    bm25 = searcher.search("XQ_frobnicate_77", text_index.name, k=3, mode="bm25")
    assert bm25 and "XQ_frobnicate_77" in bm25[0].text
    for mode in ("hybrid", "hybrid_weighted"):
        results = searcher.search("XQ_frobnicate_77", text_index.name, k=3, mode=mode)
        assert any("XQ_frobnicate_77" in r.text for r in results), mode


def test_hybrid_finds_a_paraphrase_only_dense_can_match(text_index, searcher) -> None:
    query = "a cat sleeping on a carpet"
    bm25 = searcher.search(query, text_index.name, k=5, mode="bm25")
    assert all("feline" not in r.text for r in bm25)  # no shared words
    for mode in ("dense", "hybrid", "hybrid_weighted"):
        results = searcher.search(query, text_index.name, k=3, mode=mode)
        assert any("feline" in r.text for r in results), mode


def test_metadata_filters_use_jsonb_containment(text_index, searcher) -> None:
    results = searcher.search("water", text_index.name, k=12, mode="hybrid", filters={"group": "odd"})
    assert results and all(r.metadata["group"] == "odd" for r in results)
    assert {r.doc_id for r in results} == {"doc1"}


def test_search_batch_equals_search(text_index, searcher) -> None:
    queries = ["glaciers and valleys", "interest rates", "XQ_frobnicate_77"]
    batch = searcher.search_batch(queries, text_index.name, k=4, mode="hybrid")
    for query, results in zip(queries, batch, strict=True):
        single = searcher.search(query, text_index.name, k=4, mode="hybrid")
        assert [r.chunk_id for r in results] == [r.chunk_id for r in single]


def test_mmr_returns_k_distinct_results(text_index, searcher) -> None:
    results = searcher.search("water", text_index.name, k=4, mode="dense", mmr=0.3)
    assert len(results) == 4 and len({r.chunk_id for r in results}) == 4
    assert all("mmr" in r.scores for r in results)


def test_bad_input_is_a_clear_error(text_index, searcher) -> None:
    with pytest.raises(SearchError, match="mode"):
        searcher.search("x", text_index.name, mode="fuzzy")
    with pytest.raises(SearchError, match="k"):
        searcher.search("x", text_index.name, k=0)
    with pytest.raises(SearchError, match="query"):
        searcher.search("   ", text_index.name)
    with pytest.raises(SearchError, match="filters"):
        searcher.search("x", text_index.name, filters=["group"])  # type: ignore[arg-type]
    with pytest.raises(IndexNotFoundError, match="does not exist"):
        searcher.search("x", "nowhere/none")


@pytest.fixture(scope="module")
def random_indexes(store: Store, embedder):
    """Two indexes (one partition each) of pseudo-random vectors stored as precomputed embeddings."""
    specs = []
    for salt, n_docs in (("a", 60), ("b", 30)):
        spec = make_spec(name=f"rand-{salt}")
        docs = [
            Document(
                f"r{i}",
                "\n\n".join(f"paragraph {j} of document {i} salt {salt}" for j in range(10)),
                metadata={"bucket": i % 20},
            )
            for i in range(n_docs)
        ]
        store.documents.sync(spec.collection, docs, [])
        chunker = ParagraphChunker(spec.config.config_hash, vector_for=random_unit_vector_for(seed_salt=salt))
        build_index(store, spec, embedder, chunker=chunker)
        specs.append(spec)
    return specs


def test_partitioned_and_filtered_queries_return_k_rows_when_k_exist(
    store, random_indexes, searcher, embedder
):
    big, small = random_indexes
    qvec = embedder.embed(["paragraph of a document"])[0]
    # the whole small index, and nothing from the other partition
    results = searcher.search("paragraph of a document", small.name, k=300, mode="dense")
    assert len(results) == 300 and all("salt b" in r.text for r in results)
    # a selective filter (1 in 20 documents = 30 of 600 chunks): HNSW alone would starve; still k rows
    results = searcher.search("paragraph of a document", big.name, k=25, mode="dense", filters={"bucket": 7})
    assert len(results) == 25 and all(r.metadata["bucket"] == 7 for r in results)
    allowed = {cid for cid, _ in _filtered_ids(store, big, 7)}
    assert [r.chunk_id for r in results] == _exact(store, big, qvec, 25, allowed)
    # k larger than what matches: every match, no more
    results = searcher.search("paragraph", big.name, k=100, mode="dense", filters={"bucket": 7})
    assert len(results) == 30


def _filtered_ids(store: Store, spec, bucket: int) -> list[tuple[str, str]]:
    with store.connection() as conn:
        return conn.execute(
            "SELECT chunk_id, doc_id FROM chunks WHERE index_name = %s AND metadata @> %s::jsonb",
            (spec.name, f'{{"bucket": {bucket}}}'),
        ).fetchall()


def test_dense_query_expression_matches_the_partition_hnsw_index(store, random_indexes) -> None:
    big, _ = random_indexes
    parts = partition_names(big.name)
    literal = "[" + ",".join(["0.05"] * 384) + "]"
    with store.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")  # 600 rows: prove the index is usable, not its cost
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                f'EXPLAIN SELECT chunk_id FROM "{parts["chunks"]}"'
                f" ORDER BY (embedding::vector(384)) <=> '{literal}'::vector(384) LIMIT 5"
            )
        )
    assert f"Index Scan using {parts['hnsw']}" in plan, plan


def test_hnsw_recall_on_a_600_vector_partition(
    store, random_indexes, searcher, embedder, monkeypatch
) -> None:
    monkeypatch.setenv("CHUNKYARD_EXACT_SEARCH_MAX_CHUNKS", "0")  # the graph, not the small-index exact scan
    big, _ = random_indexes
    queries = [f"query number {i}" for i in range(10)]
    qvecs = embedder.embed(queries)
    recalls = []
    for query, qvec in zip(queries, qvecs, strict=True):
        got = {r.chunk_id for r in searcher.search(query, big.name, k=10, mode="dense", ef_search=200)}
        recalls.append(len(got & set(_exact(store, big, qvec, 10))) / 10)
    assert np.mean(recalls) >= 0.95


def test_module_level_search_uses_the_default_searcher(monkeypatch, pg_url, text_index, embedder) -> None:
    import chunkyard.retrieval.query.searcher as searcher_module

    import chunkyard

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setattr(searcher_module, "_default", Searcher(Store(pg_url), embedder))
    results = chunkyard.search("XQ_frobnicate_77", index=text_index.name, k=2, mode="bm25")
    assert results and "XQ_frobnicate_77" in results[0].text
    options = chunkyard.SearchOptions(k=2, mode="bm25")
    again = chunkyard.search("XQ_frobnicate_77", index=text_index.name, options=options)
    assert [(r.chunk_id, r.scores) for r in again] == [(r.chunk_id, r.scores) for r in results]
    assert chunkyard.Searcher is Searcher


def test_include_parent_returns_the_hierarchical_parent_span(store, embedder) -> None:
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

    spec = IndexSpec(
        "hier-test",
        IndexConfig(
            name="hier",
            chunker={"strategy": "hierarchical", "size": 16, "parent_size": 48, "tokenizer": "model"},
            bm25={"analyzer": "english"},
        ),
    )
    text = "\n\n".join(TOPICS)
    store.documents.sync(spec.collection, [Document("all.md", text)], [])
    build_index(store, spec, embedder)
    results = Searcher(store, embedder).search("waggle dance", spec.name, k=3, include_parent=True)
    assert results and all(r.parent is not None for r in results)
    for r in results:
        assert r.parent["text"] == text[r.parent["start"] : r.parent["end"]]
        assert (
            r.parent["start"] <= r.start and r.end <= r.parent["end"] and len(r.parent["text"]) > len(r.text)
        )
        assert r.parent["chunk_id"] == r.metadata["parent_id"]
    assert Searcher(store, embedder).search("waggle dance", spec.name, k=1)[0].parent is None


def test_sql_and_in_memory_bm25_backends_agree(store, text_index, embedder) -> None:
    in_sql = Searcher(store, embedder, bm25_backend="sql")
    in_memory = Searcher(store, embedder, bm25_backend="memory")
    in_memory.warm(text_index.name)
    for query in ("water sunlight sugar", "the queue depth", "XQ_frobnicate_77 glaciers"):
        a = in_sql.search(query, text_index.name, k=5, mode="bm25")
        b = in_memory.search(query, text_index.name, k=5, mode="bm25")
        assert [r.chunk_id for r in a] == [r.chunk_id for r in b]
        assert [r.scores["bm25"] for r in a] == pytest.approx([r.scores["bm25"] for r in b], rel=1e-12)
    with pytest.raises(SearchError, match="bm25_backend"):
        Searcher(store, embedder, bm25_backend="elastic")


def test_ef_search_default_comes_from_the_environment(store, embedder, monkeypatch) -> None:
    assert Searcher(store, embedder).ef_search == 100
    monkeypatch.setenv("CHUNKYARD_EF_SEARCH", "600")
    assert Searcher(store, embedder).ef_search == 600
    assert Searcher(store, embedder, ef_search=40).ef_search == 40
    for bad in ("many", "0", "5000"):
        monkeypatch.setenv("CHUNKYARD_EF_SEARCH", bad)
        with pytest.raises(SearchError, match="ef_search"):
            Searcher(store, embedder)
