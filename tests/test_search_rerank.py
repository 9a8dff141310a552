"""Rerankers: a tiny CrossEncoder built locally (no download) and MaxSim over the model's tokens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from chunkyard.chunking.models import resolve_model_path
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.rerankers import (
    CrossEncoderReranker,
    MaxSimReranker,
    RerankerConfigError,
    build_reranker,
)
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import ParagraphChunker, make_spec

PARAGRAPHS = [
    "The ingestion queue depth is reported by XQ_frobnicate_77.",
    "Glaciers carve valleys as they slowly move downhill.",
    "Sourdough bread needs a lively starter and patience.",
    "The central bank raised interest rates again.",
    "Honeybees dance to share where the flowers are.",
    "Queues hold messages until a worker takes them.",
]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 1-layer BERT sequence classifier with random weights and MiniLM's tokenizer, saved locally."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    path = tmp_path_factory.mktemp("tiny-cross-encoder")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(path)
    source = Path(resolve_model_path("all-MiniLM-L6-v2"))
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, path / name)
    return str(path)


@pytest.fixture(scope="module")
def index(pg_url: str, embedder):
    store = Store(pg_url)
    store.migrate()
    spec = make_spec(bm25={"analyzer": "english"})
    store.documents.sync(spec.collection, [Document("doc", "\n\n".join(PARAGRAPHS))], [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return store, spec


def test_cross_encoder_scores_match_sentence_transformers(tiny_cross_encoder: str) -> None:
    from sentence_transformers import CrossEncoder

    reranker = CrossEncoderReranker(tiny_cross_encoder)
    texts = PARAGRAPHS[:3]
    direct = CrossEncoder(tiny_cross_encoder, device="cpu").predict([("queue depth", t) for t in texts])
    assert reranker.score("queue depth", texts) == pytest.approx([float(x) for x in direct], rel=1e-5)
    assert reranker.score("queue depth", []) == []


def test_search_reorders_candidates_by_the_cross_encoder(index, embedder, tiny_cross_encoder: str) -> None:
    store, spec = index
    searcher = Searcher(store, embedder, rerank_candidates=6)
    plain = searcher.search("queue depth", spec.name, k=6, mode="hybrid")
    reranked = searcher.search(
        "queue depth", spec.name, k=3, mode="hybrid", rerank=f"cross-encoder:{tiny_cross_encoder}"
    )
    scores = [r.scores["rerank"] for r in reranked]
    assert scores == sorted(scores, reverse=True) and len(reranked) == 3
    assert {r.chunk_id for r in reranked} <= {r.chunk_id for r in plain}
    assert all("rerank_ms" in r.timings and "rrf" in r.scores for r in reranked)
    expected = CrossEncoderReranker(tiny_cross_encoder).score("queue depth", [r.text for r in plain])
    best = sorted(zip(expected, [r.chunk_id for r in plain], strict=True), reverse=True)[:3]
    assert [r.chunk_id for r in reranked] == [cid for _, cid in best]


def test_maxsim_prefers_token_level_matches(index, embedder) -> None:
    store, spec = index
    reranker = MaxSimReranker(embedder)
    scores = reranker.score("ingestion queue depth", PARAGRAPHS)
    assert max(range(len(scores)), key=scores.__getitem__) == 0
    results = Searcher(store, embedder).search("ingestion queue depth", spec.name, k=2, rerank="maxsim")
    assert (
        "XQ_frobnicate_77" in results[0].text and results[0].scores["rerank"] >= results[1].scores["rerank"]
    )


def test_unknown_rerankers_are_clear_errors(tmp_path) -> None:
    with pytest.raises(RerankerConfigError, match="unknown reranker"):
        build_reranker("colbert-v9")
    with pytest.raises(RerankerConfigError, match="not available locally"):
        CrossEncoderReranker(str(tmp_path / "missing"))


def test_rerankers_from_config_mappings(tiny_cross_encoder: str, embedder) -> None:
    cross = build_reranker({"kind": "cross-encoder", "model": tiny_cross_encoder, "batch_size": 4})
    assert isinstance(cross, CrossEncoderReranker) and cross.batch_size == 4
    assert isinstance(build_reranker({"model": tiny_cross_encoder}), CrossEncoderReranker)
    assert isinstance(build_reranker({"kind": "maxsim"}, embedder=embedder), MaxSimReranker)
    with pytest.raises(RerankerConfigError, match="rerank.kind"):
        build_reranker({"kind": "llm", "model": "x"})
