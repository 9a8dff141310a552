"""BM25: the analyzer, and scores from the persisted index equal rank_bm25.BM25Okapi.get_scores."""

from __future__ import annotations

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store import bm25 as bm25_lib
from chunkyard.retrieval.store.indexes import partition_names
from rank_bm25 import BM25Okapi

from tests.test_indexing_support import ParagraphChunker, make_spec, random_unit_vector_for

CORPUS = [
    "The cat sat on the mat. The cat was happy.",
    "Dogs chase cats; the dog barked at the cat.",
    "Postgres stores vectors and the HNSW graph answers queries.",
    "the the the the",
    "Reciprocal rank fusion merges the dense and the lexical rankings.",
    "Una frase en español: los gatos duermen en la casa.",
    "東京は日本の首都です。 Tokyo is the capital.",
    "cat cat cat cat cat dog",
    "An entirely unrelated sentence about gardening tomatoes.",
    "",
]


def test_standard_analyzer_lowercases_unicode_words() -> None:
    analyzer = bm25_lib.Analyzer()
    assert analyzer.analyze("Héllo, WORLD! naïve_Code42 x-y") == ["héllo", "world", "naïve_code42", "x", "y"]


def test_english_analyzer_stems_and_drops_stopwords() -> None:
    analyzer = bm25_lib.Analyzer("english")
    assert analyzer.analyze("The running dogs were barking at the cats") == ["run", "dog", "bark", "cat"]


def test_spanish_analyzer_stems_and_drops_stopwords() -> None:
    analyzer = bm25_lib.Analyzer("spanish")
    terms = analyzer.analyze("Los gatos duermen en la casa")
    assert "los" not in terms and "la" not in terms and "en" not in terms
    assert terms == [bm25_lib.Analyzer("spanish").analyze(w)[0] for w in ("gatos", "duermen", "casa")]
    assert analyzer.analyze("gatos") == analyzer.analyze("gato")


def test_cjk_runs_become_character_bigrams() -> None:
    analyzer = bm25_lib.Analyzer()
    assert analyzer.analyze("東京都 abc日本") == ["東京", "京都", "abc", "日本"]
    assert analyzer.analyze("猫") == ["猫"]


def test_unknown_analyzer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="bm25.analyzer"):
        bm25_lib.build_analyzer({"analyzer": "klingon"})


def _build(store: Store, embedder, docs: list[Document], spec) -> None:
    store.documents.sync(spec.collection, docs, [])
    chunker = ParagraphChunker(spec.config.config_hash, vector_for=random_unit_vector_for())
    build_index(store, spec, embedder, chunker=chunker)


def _all_scores(store: Store, spec, tokens: list[str], params: bm25_lib.Bm25Params) -> dict[str, float]:
    parts = partition_names(spec.name)
    with store.connection() as conn:
        return dict(
            bm25_lib.sql_top_k(conn, spec.name, parts["postings"], parts["chunks"], tokens, params, k=10_000)
        )


def _chunk_ids_in_order(store: Store, spec, docs: list[Document]) -> list[str]:
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT doc_id, chunk_id FROM chunks WHERE index_name = %s", (spec.name,)
        ).fetchall()
    by_doc = dict(rows)
    return [by_doc[d.id] for d in docs]


QUERIES = [
    ["cat"],
    ["cat", "cat", "dog"],  # repeated query term counts twice, as in rank-bm25
    ["the"],  # in most documents: negative idf floored at epsilon * mean idf
    ["unseen", "cat"],  # unseen terms add nothing
    ["東京", "tokyo"],
    ["gatos", "casa", "hnsw"],
]


@pytest.mark.parametrize("params", [bm25_lib.Bm25Params(), bm25_lib.Bm25Params(k1=1.2, b=0.5, epsilon=0.5)])
def test_persisted_bm25_scores_equal_rank_bm25(store: Store, embedder, params) -> None:
    docs = [Document(f"d{i}", text or "\u200b") for i, text in enumerate(CORPUS)]
    spec = make_spec(bm25={"k1": params.k1, "b": params.b, "epsilon": params.epsilon, "analyzer": "standard"})
    _build(store, embedder, docs, spec)
    analyzer = bm25_lib.build_analyzer(spec.config.bm25)
    chunk_ids = _chunk_ids_in_order(store, spec, docs)
    oracle = BM25Okapi(
        [analyzer.analyze(d.text) for d in docs], k1=params.k1, b=params.b, epsilon=params.epsilon
    )
    with store.connection() as conn:
        memory = bm25_lib.MemoryBm25.load(conn, spec.name, params)
    memory_order = [memory.chunk_ids.index(c) for c in chunk_ids]
    for tokens in QUERIES:
        expected = oracle.get_scores(tokens)
        stored = _all_scores(store, spec, tokens, params)
        got = np.array([stored.get(c, 0.0) for c in chunk_ids])
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=str(tokens))
        np.testing.assert_allclose(memory.scores(tokens)[memory_order], expected, rtol=1e-12, atol=1e-12)
        # top-k agrees too (the SQL path only returns chunks that contain a query term)
        top = memory.top_k(tokens, 3)
        assert [c for c, _ in top] == [c for c, _ in bm25_lib_top(stored, 3)]


def bm25_lib_top(scores: dict[str, float], k: int) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]


def test_incremental_updates_keep_scores_equal_to_a_fresh_rank_bm25(store: Store, embedder) -> None:
    spec = make_spec()
    docs = [Document(f"d{i}", text) for i, text in enumerate(CORPUS) if text]
    _build(store, embedder, docs, spec)
    # change two documents, delete one, add one: the postings, df and stats are updated in place
    docs = [d for d in docs if d.id != "d2"]
    docs[0] = Document("d0", "A completely new text about cats and databases.")
    docs[3] = Document(docs[3].id, "dog dog the cat")
    docs.append(Document("d99", "Fresh document: the HNSW graph of the cat."))
    _build(store, embedder, docs, spec)
    analyzer = bm25_lib.build_analyzer(spec.config.bm25)
    params = bm25_lib.Bm25Params.from_config(spec.config.bm25)
    oracle = BM25Okapi(
        [analyzer.analyze(d.text) for d in docs], k1=params.k1, b=params.b, epsilon=params.epsilon
    )
    chunk_ids = _chunk_ids_in_order(store, spec, docs)
    with store.connection() as conn:
        stats = bm25_lib.load_stats(conn, spec.name)
        vocabulary = conn.execute(
            "SELECT count(*) FROM bm25_terms WHERE index_name = %s", (spec.name,)
        ).fetchone()[0]
    assert stats.n_docs == len(docs)
    assert vocabulary == len(oracle.idf)
    assert stats.idf_sum / stats.vocab_size == pytest.approx(oracle.average_idf, rel=1e-12)
    for tokens in QUERIES + [["new", "databases"], ["fresh", "graph"]]:
        stored = _all_scores(store, spec, tokens, params)
        got = np.array([stored.get(c, 0.0) for c in chunk_ids])
        np.testing.assert_allclose(
            got, oracle.get_scores(tokens), rtol=1e-12, atol=1e-12, err_msg=str(tokens)
        )
