"""Fusion: the calibrated `hybrid_auto` by hand, the `served` variant is the service default, and on the
Spanish and Indonesian sets the served variant is no worse than BM25 (real model, real chunker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.evalset import read_eval_set
from chunkyard.evaluation.runner import SERVED_VARIANT, EvaluationReport, EvaluationRequest, evaluate_index
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.fusion import (
    AGREEMENT_DEPTH,
    CONFIRMED_DENSE_SCALE,
    calibrated_weight,
    corroboration,
    fuse,
    trusted_weight,
)
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.settings.index_defaults import AUTO_WEIGHT, auto_weight
from chunkyard.retrieval.settings.options import DEFAULT_MODE, SearchOptions, default_of, option_schemas
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import ParagraphChunker, make_spec

DATA = Path(__file__).parent / "data" / "multilingual"


def test_corroboration_is_the_share_of_a_lists_top_the_other_list_found() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6)]
    lexical = [("c", 9.0), ("a", 5.0), ("x", 4.0)]
    assert corroboration(dense, lexical) == 2 / 4  # a and c of a, b, c, d
    assert corroboration(lexical, dense) == 2 / 3  # c and a of c, a, x
    assert corroboration(dense, lexical, depth=1) == 1.0
    assert corroboration([], lexical) == 0.0


def test_calibrated_weight_by_hand() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6)]
    lexical = [("c", 9.0), ("a", 5.0), ("x", 4.0)]
    # share = 0.5 / (0.5 + 2/3) = 3/7; weight = 2 * 0.25 * 3/7
    assert calibrated_weight(dense, lexical, 0.25) == pytest.approx(3 / 14)
    # no corroboration either way (or one list empty) keeps the base weight
    assert calibrated_weight([("a", 1.0)], [("b", 1.0)], 0.25) == 0.25
    assert calibrated_weight([("a", 1.0)], [], 0.1) == 0.1
    # BM25 found everything dense ranks, dense none of BM25's: weight 0 (BM25's order)
    assert calibrated_weight([("a", 1.0)], [("b", 2.0), ("a", 1.0)], 0.25) == pytest.approx(
        2 * 0.25 * 1 / 1.5
    )
    assert calibrated_weight([("a", 1.0), ("b", 0.5)], [("a", 2.0)], 0.4) == pytest.approx(
        2 * 0.4 * 0.5 / 1.5
    )
    assert calibrated_weight([("a", 1.0)], [("a", 2.0)], 0.75) == 0.75  # equal agreement: base
    assert calibrated_weight([("a", 1.0)], [("b", 2.0), ("a", 1.0)], 0.75) <= 1.0


def test_trusted_weight_raises_the_dense_weight_when_bm25_confirms_denses_best() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5)]
    others = [(f"x{i}", 10.0 - i) for i in range(AGREEMENT_DEPTH)]
    # dense's best chunk among BM25's top AGREEMENT_DEPTH: at least the scaled base
    assert trusted_weight(dense, [*others[:-1], ("a", 0.5)], 0.25) == pytest.approx(
        0.25 * CONFIRMED_DENSE_SCALE
    )
    # just below that depth, or only dense's second chunk confirmed: the calibrated weight as it was
    below = [*others, ("a", 0.5)]
    assert trusted_weight(dense, below, 0.25) == calibrated_weight(dense, below, 0.25)
    assert trusted_weight(dense, [("b", 1.0)], 0.25) == calibrated_weight(dense, [("b", 1.0)], 0.25)
    # a calibrated weight above the floor is kept; the floor never passes 1
    assert trusted_weight([("a", 1.0)], [("a", 2.0)], 0.75) == 1.0
    assert trusted_weight([("a", 1.0)], [("a", 2.0)], 0.5) == pytest.approx(0.5 * CONFIRMED_DENSE_SCALE)
    assert trusted_weight([], [("a", 1.0)], 0.25) == calibrated_weight([], [("a", 1.0)], 0.25)


def test_hybrid_auto_ranks_by_the_calibrated_weighted_scores() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6)]
    lexical = [("c", 9.0), ("a", 5.0), ("x", 4.0)]
    fused = dict(fuse("hybrid_auto", dense, lexical, rrf_k=60, weight=0.5, auto_weight=0.25))
    w = 3 / 14
    # min-max: dense a 1, b 2/3, c 1/3, d 0; bm25 c 1, a 0.2, x 0 (missing: 0)
    expected = {
        "a": w * 1.0 + (1 - w) * 0.2,
        "b": w * (2 / 3),
        "c": w * (1 / 3) + (1 - w) * 1.0,
        "d": 0.0,
        "x": 0.0,
    }
    assert {cid: s["auto"] for cid, s in fused.items()} == pytest.approx(expected)
    assert all(s["auto_weight"] == pytest.approx(w) for s in fused.values())
    order = [cid for cid, _ in fuse("hybrid_auto", dense, lexical, 60, 0.5, 0.25)]
    assert order == ["c", "a", "b", "d", "x"]  # ties by chunk id
    # trust_dense: BM25's list holds dense's best chunk "a", so the weight rises to the scaled base
    trusted = dict(fuse("hybrid_auto", dense, lexical, 60, 0.5, 0.25, trust_dense=True))
    assert all(s["auto_weight"] == pytest.approx(0.25 * CONFIRMED_DENSE_SCALE) for s in trusted.values())
    assert trusted["a"]["auto"] > fused["a"]["auto"] and trusted["c"]["auto"] < fused["c"]["auto"]
    # hybrid (RRF) and hybrid_weighted are unchanged by the new mode
    rrf = dict(fuse("hybrid", dense, lexical, 60, 0.5))
    assert rrf["a"]["rrf"] == pytest.approx(1 / 61 + 1 / 62) and rrf["x"]["rrf"] == pytest.approx(1 / 63)
    weighted = dict(fuse("hybrid_weighted", dense, lexical, 60, 0.5))
    assert weighted["c"]["weighted"] == pytest.approx(0.5 / 3 + 0.5) and "auto_weight" not in weighted["c"]


def test_auto_weight_follows_the_models_languages() -> None:
    minilm = {"embedding_model": "all-MiniLM-L6-v2"}
    assert auto_weight({**minilm, "bm25": {"languages": {"en": 1.0}}}) == AUTO_WEIGHT
    assert auto_weight({**minilm, "bm25": {"languages": {"es": 1.0}}}) == pytest.approx(0.1)
    assert auto_weight({**minilm, "bm25": {"languages": {"es": 0.5, "en": 0.5}}}) == pytest.approx(0.175)
    assert auto_weight({**minilm, "bm25": {"languages": {"": 1.0}}}) == AUTO_WEIGHT  # undetected
    assert auto_weight({**minilm, "bm25": {}}) == AUTO_WEIGHT  # built before analyzer: auto
    assert (
        auto_weight({"embedding_model": "some-multilingual-model", "bm25": {"languages": {"es": 1.0}}})
        == 0.25
    )


def test_the_default_mode_is_hybrid_auto_everywhere() -> None:
    from chunkyard.retrieval.api.service import request_model

    assert default_of("mode") == DEFAULT_MODE == "hybrid_auto" and SearchOptions().mode is None
    assert next(s for s in option_schemas() if s.name == "mode").default == DEFAULT_MODE
    assert request_model().model_fields["mode"].default == DEFAULT_MODE


def _tiny_index(store: Store, embedder) -> IndexSpec:
    docs = [
        Document("a.md", "Kettles boil water quickly.\n\nTeapots steep leaves slowly."),
        Document("b.md", "Bicycles need oiled chains.\n\nTyres lose air in the cold."),
        Document("c.md", "Glaciers carve valleys.\n\nRivers carry the silt to the sea."),
    ]
    spec = make_spec(bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"})
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec


def test_variant_served_scores_exactly_the_service_default(store: Store, embedder) -> None:
    spec = _tiny_index(store, embedder)
    questions = _questions(store, spec)
    searcher = Searcher(store, embedder)
    report = evaluate_index(
        searcher,
        spec,
        questions,
        EvaluationRequest(variants=(SERVED_VARIANT, DEFAULT_MODE, "hybrid"), k=2, n_resamples=10),
        store=store,
    )
    served, default = report.summaries[SERVED_VARIANT], report.summaries[DEFAULT_MODE]
    trimmed = {"trimmed_recall_1024", "trimmed_recall_2048"}  # served only: the budgeted request
    assert all(
        set(scores) - set(default.per_question[q]) == trimmed for q, scores in served.per_question.items()
    )
    assert {
        q: {m: v for m, v in scores.items() if m not in trimmed} for q, scores in served.per_question.items()
    } == (default.per_question)
    assert report.settings["served_mode"] == DEFAULT_MODE
    # what the search call with no options returns, result for result
    for question in questions:
        plain = searcher.search(question.text, spec.name, k=2)
        explicit = searcher.search(question.text, spec.name, k=2, mode=DEFAULT_MODE)
        assert [r.chunk_id for r in plain] == [r.chunk_id for r in explicit]
    # the misses table round-trips with the report and names the reference and what came instead
    again = EvaluationReport.from_dict(report.as_dict())
    assert again.as_dict() == report.as_dict()
    assert set(report.missed) == {SERVED_VARIANT, DEFAULT_MODE, "hybrid"}
    for variant, rows in report.misses.items():
        assert len(rows) == report.missed[variant]
        for miss in rows:
            assert miss["reference"][0]["text"] and len(miss["retrieved"]) <= 2
    assert "Questions missed" in report.misses_markdown()


def _questions(store: Store, spec: IndexSpec):
    from chunkyard.evaluation.datasets.evalset import resolve_records

    records = [
        {"id": "q1", "question": "how fast does a kettle boil water", "references": [
            {"document": "a.md", "text": "Kettles boil water quickly."}]},
        {"id": "q2", "question": "what happens to tyres when it is cold", "references": [
            {"document": "b.md", "text": "Tyres lose air in the cold."}]},
        {"id": "q3", "question": "where does the silt end up", "references": [
            {"document": "c.md", "text": "Rivers carry the silt to the sea."}]},
        {"id": "q4", "question": "what do teapots do", "references": [
            {"document": "b.md", "text": "Bicycles need oiled chains."}]},  # a miss on purpose
    ]  # fmt: skip
    return resolve_records(
        records, store.documents.read(spec.collection), on_missing="error", source="test"
    ).questions


@pytest.mark.parametrize("language", ["es", "id"])
def test_served_variant_is_no_worse_than_bm25_on_the_multilingual_sets(
    store: Store, embedder, language: str
) -> None:
    """Real model, real recursive chunker (48 model tokens: ~5 chunks a document, so top 5 ranks)."""
    docs = [Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / language).glob("*.md"))]
    config = IndexConfig(
        name="recursive-48",
        chunker={"strategy": "recursive", "size": 48, "overlap": 0, "tokenizer": "model"},
        bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "auto"},
    )
    spec = IndexSpec(make_spec().collection, config)
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder)
    questions = read_eval_set(DATA / f"{language}_questions.jsonl", docs, on_missing="error").questions
    report = evaluate_index(
        Searcher(store, embedder),
        spec,
        questions,
        EvaluationRequest(variants=("bm25", SERVED_VARIANT), k=5, n_resamples=10),
        store=store,
    )
    means = report.metrics
    for metric in ("hit_at_5", "recall_at_5", "mrr_at_5"):
        assert means[SERVED_VARIANT][metric] >= means["bm25"][metric] - 1e-9, (metric, means)
    info = store.indexes.info(spec.name)
    assert info is not None and info["config"]["bm25"]["languages"] == {language: 1.0}
