"""Adaptive granularity (`coarse` in an index config) on real Postgres and the real model.

A fine index answers when its ranking is clear; when the gap between its first and k-th result is
below `min_gap`, the same collection's coarse index (larger chunks) answers instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from chunkyard.chunking.types import Chunk, Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import IndexNotFoundError, Searcher, SearchError
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec, SettingsError, load_index_configs
from chunkyard.retrieval.settings.config_checks import load_index_specs
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import ParagraphChunker
from tests.test_search_context import BM25, DOCUMENTS  # four documents of three paragraphs

QUERY = "what lies below the summit of the volcano"


class WholeDocumentChunker:
    """One chunk per document: the coarsest granularity."""

    def __init__(self, config_key: str) -> None:
        self.config_key = config_key

    def chunk(self, document: Document) -> list[Chunk]:
        text = document.text
        return [
            Chunk(document.id, 0, len(text), text, token_count=len(text.split()), config_key=self.config_key)
        ]

    def chunk_batch(self, documents: Iterable[Document]) -> list[list[Chunk]]:
        return [self.chunk(d) for d in documents]


def _config(name: str, coarse: dict | None = None) -> IndexConfig:
    return IndexConfig(
        name=name,
        chunker={"strategy": "whole-test" if name == "whole" else "paragraph-test"},
        bm25=BM25,
        hybrid={"weight": 0.5, "candidates": 50},
        coarse=coarse or {},
    )


@pytest.fixture(scope="module")
def indexes(store: Store, embedder) -> tuple[IndexSpec, IndexSpec, IndexSpec]:
    """(fine with a coarse fallback, the coarse index, the same fine chunks without a fallback)."""
    collection = f"coarse{uuid.uuid4().hex[:8]}"
    docs = [Document(doc_id, "\n\n".join(paragraphs)) for doc_id, paragraphs in DOCUMENTS.items()]
    store.documents.sync(collection, docs, [])
    coarse = IndexSpec(collection, _config("whole"))
    build_index(store, coarse, embedder, chunker=WholeDocumentChunker(coarse.config.config_hash))
    fine = IndexSpec(collection, _config("paragraphs", {"config": "whole", "min_gap": 0.5}))
    build_index(store, fine, embedder, chunker=ParagraphChunker(fine.config.config_hash))
    plain = IndexSpec(collection, _config("plain-paragraphs"))
    build_index(store, plain, embedder, chunker=ParagraphChunker(plain.config.config_hash))
    return fine, coarse, plain


@pytest.fixture(scope="module")
def searcher(store: Store, embedder) -> Searcher:
    return Searcher(store, embedder)


def test_the_gap_decides_which_index_answers(indexes, searcher) -> None:
    fine, coarse, _ = indexes
    own = searcher.search(QUERY, fine.name, k=3, mode="hybrid_weighted", coarse_min_gap=0.0)
    gap = own[0].scores["fine_gap"]
    assert 0.0 < gap <= 1.0 and all(r.scores["fine_gap"] == gap for r in own)
    assert {r.index for r in own} == {fine.name} and len(own) == 3

    kept = searcher.search(QUERY, fine.name, k=3, mode="hybrid_weighted", coarse_min_gap=gap * 0.99)
    assert [r.chunk_id for r in kept] == [r.chunk_id for r in own]

    answered = searcher.search(
        QUERY, fine.name, k=3, mode="hybrid_weighted", coarse_min_gap=min(1.0, gap * 1.01)
    )
    direct = searcher.search(QUERY, coarse.name, k=3, mode="hybrid_weighted")
    assert {r.index for r in answered} == {coarse.name}
    assert [r.chunk_id for r in answered] == [r.chunk_id for r in direct]
    assert answered[0].doc_id == "volcano.md" and answered[0].text == "\n\n".join(DOCUMENTS["volcano.md"])
    assert all(r.scores["fine_gap"] == gap for r in answered)
    timings = answered[0].timings  # the fine ranking's time is part of the answer's
    assert timings["fine_ms"] > 0 and timings["total_ms"] > timings["fine_ms"]


def test_the_gap_is_the_normalised_drop_from_first_to_fifth_whatever_k(indexes, searcher) -> None:
    fine, _, plain = indexes
    ranked = searcher.search(QUERY, plain.name, k=12, mode="hybrid_weighted")  # every paragraph
    scores = [r.scores["weighted"] for r in ranked]
    expected = (scores[0] - scores[4]) / (max(scores) - min(scores))  # `rank` defaults to 5
    for k in (2, 5, 12):
        own = searcher.search(QUERY, fine.name, k=k, mode="hybrid_weighted", coarse_min_gap=0.0)
        assert own[0].scores["fine_gap"] == pytest.approx(expected)
        assert [r.chunk_id for r in own] == [r.chunk_id for r in ranked[:k]]  # same chunk ids and ranking


def test_batches_mix_fine_and_coarse_answers_in_query_order(indexes, searcher) -> None:
    fine, coarse, _ = indexes
    queries = [QUERY, "how is sourdough bread baked", "what do hikers carry"]
    gaps = [
        r[0].scores["fine_gap"]
        for r in searcher.search_batch(queries, fine.name, k=3, mode="hybrid_weighted", coarse_min_gap=0.0)
    ]
    threshold = sorted(gaps)[1]  # the queries with the smallest gap fall back, the others do not
    mixed = searcher.search_batch(queries, fine.name, k=3, mode="hybrid_weighted", coarse_min_gap=threshold)
    for gap, results in zip(gaps, mixed, strict=True):
        assert {r.index for r in results} == {coarse.name if gap < threshold else fine.name}


def test_the_config_threshold_applies_without_an_override(indexes, searcher) -> None:
    fine, coarse, _ = indexes
    results = searcher.search(QUERY, fine.name, k=3, mode="hybrid_weighted")
    gap = results[0].scores["fine_gap"]
    assert {r.index for r in results} == {coarse.name if gap < 0.5 else fine.name}


def test_errors_are_clear(store, embedder, indexes, searcher) -> None:
    fine, _, plain = indexes
    with pytest.raises(SearchError, match="has no `coarse` index config"):
        searcher.search(QUERY, plain.name, coarse_min_gap=0.2)
    with pytest.raises(SearchError, match="coarse_min_gap: must be a number between 0 and 1"):
        searcher.search(QUERY, fine.name, coarse_min_gap=1.5)
    orphan = IndexSpec(fine.collection, _config("orphan", {"config": "never-built", "min_gap": 1.0}))
    build_index(store, orphan, embedder, chunker=ParagraphChunker(orphan.config.config_hash))
    with pytest.raises(IndexNotFoundError, match="falls back to .*never-built"):
        searcher.search(QUERY, orphan.name, k=3, mode="hybrid_weighted")


def test_the_http_service_passes_the_override(indexes, searcher) -> None:
    from chunkyard.retrieval.api.service import create_app
    from fastapi.testclient import TestClient

    fine, coarse, _ = indexes
    http = TestClient(create_app(searcher), raise_server_exceptions=False)
    body = {"query": QUERY, "index": fine.name, "k": 3, "mode": "hybrid_weighted"}
    response = http.post("/v1/search", json={**body, "coarse_min_gap": 1.0})
    assert response.status_code == 200, response.text
    assert response.json()["index"] == coarse.name
    response = http.post("/v1/search", json={**body, "coarse_min_gap": 0.0})
    assert response.json()["index"] == fine.name


@pytest.mark.parametrize(
    ("coarse", "message"),
    [
        ("{config: big}", "expected a mapping with `config` and `min_gap`"),
        ("{config: big, min_gap: 0.2, ranks: 3}", "expected a mapping with `config` and `min_gap`"),
        ("{config: big, min_gap: 0.2, rank: 1}", "coarse.rank: must be an integer between 2 and 100"),
        ("{config: big, min_gap: 2}", "coarse.min_gap: must be a number between 0 and 1"),
        ("{config: nope, min_gap: 0.2}", "coarse.config: unknown index config 'nope'"),
        ("{config: small, min_gap: 0.2}", "must be a plain index config"),
    ],
)
def test_bad_coarse_config_names_the_field(tmp_path: Path, coarse: str, message: str) -> None:
    path = tmp_path / "indexes.yaml"
    path.write_text(
        "indexes:\n  big:\n    chunker: {strategy: token, size: 256}\n"
        f"  small:\n    chunker: {{strategy: token, size: 64}}\n    coarse: {coarse}\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError) as error:
        load_index_configs(path)
    assert "indexes.small" in str(error.value) and message in str(error.value)


def test_a_collection_listing_the_fine_config_builds_the_coarse_one_first(tmp_path: Path) -> None:
    indexes_path, collections_path = tmp_path / "indexes.yaml", tmp_path / "collections.yaml"
    indexes_path.write_text(
        "indexes:\n  big:\n    chunker: {strategy: token, size: 256}\n"
        "  small:\n    chunker: {strategy: token, size: 64}\n    coarse: {config: big, min_gap: 0.2}\n",
        encoding="utf-8",
    )
    collections_path.write_text(
        "collections:\n  docs:\n    folders: [docs]\n    indexes: [small]\n", encoding="utf-8"
    )
    specs = load_index_specs(indexes_path, collections_path)
    assert [spec.name for spec in specs] == ["docs/big", "docs/small"]
    assert specs[1].config.coarse == {"config": "big", "min_gap": 0.2, "rank": 5}
    assert specs[1].config.as_dict()["coarse"] == specs[1].config.coarse


def test_evaluation_scores_the_answers_served_and_counts_both_indexes(store, indexes, searcher) -> None:
    from chunkyard.evaluation.datasets import Question, Span
    from chunkyard.evaluation.metrics import score_question
    from chunkyard.evaluation.runner import EvaluationRequest, evaluate_index

    fine, coarse, _ = indexes
    text = "\n\n".join(DOCUMENTS["volcano.md"])
    start = text.index("five kilometres")
    question = Question("q1", QUERY, [Span("volcano.md", start, start + len("five kilometres"))])
    report = evaluate_index(
        searcher,
        fine,
        [question],
        EvaluationRequest(variants=("hybrid_weighted",), k=3, n_resamples=50),
        store=store,
    )
    served = searcher.search_batch([QUERY], fine.name, k=20, mode="hybrid_weighted")[0]  # as the runner asks
    expected = score_question(question, served, k=3)
    got = report.summaries["hybrid_weighted"].per_question["q1"]
    for name in ("hit_at_3", "recall_at_3", "chroma_iou_at_3"):
        assert got[name] == pytest.approx(expected[name])
    assert report.cost["chunks"] == 12.0 and report.cost["coarse_chunks"] == 4.0
    assert report.cost["coarse_tokens_embedded"] > 0


def test_precomputed_query_vectors_give_the_same_answers(indexes, searcher, embedder) -> None:
    """The coarse fallback reuses the fine index's query vectors when both use the same model."""
    fine, coarse, _ = indexes
    queries = [QUERY, "what do hikers carry"]
    vectors = embedder.embed(queries)
    for index in (fine.name, coarse.name):
        given = searcher.search_batch(queries, index, k=3, mode="hybrid_weighted", query_vectors=vectors)
        embedded = searcher.search_batch(queries, index, k=3, mode="hybrid_weighted")
        assert [[r.chunk_id for r in rs] for rs in given] == [[r.chunk_id for r in rs] for rs in embedded]
    with pytest.raises(SearchError, match=r"query_vectors: expected shape \(2, 384\)"):
        searcher.search_batch(queries, fine.name, k=3, mode="dense", query_vectors=vectors[:1])


def test_searching_the_coarse_index_beside_the_fine_ranking_answers_the_same(
    indexes, searcher, monkeypatch
) -> None:
    """The side-by-side path (off by default: slower on 2 cores) gives the same answers as afterwards."""
    from chunkyard.retrieval.query import searcher as searcher_module

    fine, _, _ = indexes
    queries = [QUERY, "which documents mention lava", "glaciers"]
    for gap in (0.0, 1.0):
        after = [
            searcher.search(q, fine.name, k=3, mode="hybrid_weighted", coarse_min_gap=gap) for q in queries
        ]
        monkeypatch.setattr(searcher_module, "SPECULATE_MAX_QUERIES", 1)
        beside = [
            searcher.search(q, fine.name, k=3, mode="hybrid_weighted", coarse_min_gap=gap) for q in queries
        ]
        monkeypatch.setattr(searcher_module, "SPECULATE_MAX_QUERIES", 0)
        for one, two in zip(after, beside, strict=True):
            assert [(r.chunk_id, r.index, r.scores) for r in one] == [
                (r.chunk_id, r.index, r.scores) for r in two
            ]
