"""The static tier: distilled offline from the real all-MiniLM-L6-v2, cached, indexed and searched.

Distilling the whole vocabulary runs the model over ~29.5k word pieces (1.5-3 min on 2 cores), so the
session distils once with `vocabulary_size: 4000` (the first 4,000 word-piece ids: specials, single
characters and ~2,000 common words, ~15 s); the code path is the one the full model takes.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from chunkyard.chunking.model_cache import READY
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.base import EmbedderConfigError
from chunkyard.retrieval.embedders.embedder import Embedder, load_embedder
from chunkyard.retrieval.embedders.static_model import static_cache_dir
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

VOCABULARY = 4000
OPTIONS = {"backend": "static", "quantize": None, "batch_size": 256, "vocabulary_size": VOCABULARY}


@pytest.fixture(scope="module")
def static_home(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("static-home")


@pytest.fixture(scope="module")
def static_embedder(static_home) -> Embedder:
    """Distilled once per module into its own model cache (nothing read from an earlier run)."""
    previous = os.environ.get("CHUNKYARD_MODEL_DIR")
    os.environ["CHUNKYARD_MODEL_DIR"] = str(static_home)
    try:
        return load_embedder(backend="static", batch_size=256, vocabulary_size=VOCABULARY)
    finally:
        if previous is None:
            os.environ.pop("CHUNKYARD_MODEL_DIR", None)
        else:
            os.environ["CHUNKYARD_MODEL_DIR"] = previous


def test_static_vectors_are_normalised_float32_and_deterministic(static_embedder, static_home) -> None:
    texts = ["the dog sat on the floor", "the bank raised its interest rate", "", "\u2167\u2167"]
    vectors = static_embedder.embed(texts)
    assert vectors.shape == (4, static_embedder.dim) == (4, 256) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(static_embedder.embed(texts), vectors)
    assert static_embedder.model_id == "all-MiniLM-L6-v2@static-v4000"
    assert static_embedder.max_seq_length == 512
    # cached in the model cache's static/, marked ready: a second Embedder loads it, same vectors
    previous = os.environ.get("CHUNKYARD_MODEL_DIR")
    os.environ["CHUNKYARD_MODEL_DIR"] = str(static_home)
    try:
        folder = static_cache_dir(static_embedder.model_path, static_embedder.static_settings)
        assert folder.parent == static_home / "static" and (folder / READY).is_file()
        again = load_embedder(backend="static", vocabulary_size=VOCABULARY)
    finally:
        if previous is None:
            os.environ.pop("CHUNKYARD_MODEL_DIR", None)
        else:
            os.environ["CHUNKYARD_MODEL_DIR"] = previous
    np.testing.assert_array_equal(again.embed(texts), vectors)
    assert not list(folder.parent.glob("*.tmp-*"))


def test_similar_sentences_score_higher_than_unrelated_ones(static_embedder) -> None:
    query, similar, unrelated = static_embedder.embed(
        ["the dog sat on the floor", "a dog was lying on the ground", "the bank raised its interest rate"]
    )
    assert query @ similar > query @ unrelated + 0.1


def test_static_gives_no_token_vectors_and_names_the_option(static_embedder) -> None:
    from chunkyard.retrieval.embedders.rerankers import MaxSimReranker

    with pytest.raises(EmbedderConfigError, match="embedder.backend: static"):
        static_embedder.embed_tokens("late chunking needs contextual vectors")
    with pytest.raises(ValueError, match="static"):
        MaxSimReranker(static_embedder)


def test_bad_static_options_are_clear_errors() -> None:
    with pytest.raises(EmbedderConfigError, match="embedder.pca_dims"):
        load_embedder(backend="static", pca_dims=1)
    with pytest.raises(EmbedderConfigError, match="embedder.vocabulary_size"):
        load_embedder(backend="static", vocabulary_size=10)
    with pytest.raises(EmbedderConfigError, match="embedder.device"):
        load_embedder(backend="static", device="cuda")
    with pytest.raises(EmbedderConfigError, match="embedder.quantize"):
        load_embedder(backend="static", quantize="int8")
    with pytest.raises(EmbedderConfigError, match="embedder.pca_dims"):
        load_embedder(backend="torch", pca_dims=128)


def test_a_static_index_builds_and_searches_through_the_pipeline(store, static_embedder) -> None:
    docs = {
        "pets.md": "The dog sat on the floor.\n\nOur cat likes to sleep in the sun.",
        "money.md": "The bank raised its interest rate.\n\nPrices went up again this year.",
        "travel.md": "We took the train to the city.\n\nThe road by the river was closed.",
    }
    spec = IndexSpec(
        "static-pipeline",
        IndexConfig(
            name="recursive-static",
            chunker={"strategy": "recursive", "size": 16, "overlap": 0, "tokenizer": "model"},
            embedder=dict(OPTIONS),
        ),
    )
    store.documents.sync(spec.collection, [Document(k, v, metadata={"path": k}) for k, v in docs.items()], [])
    meta = build_index(store, spec, static_embedder).as_metadata()
    assert meta["chunks_inserted"] == meta["chunks_total"] >= 6
    assert meta["embeddings_computed"] == meta["chunks_total"]
    info = store.indexes.info(spec.name)
    assert info["dim"] == 256 and info["document_count"] == 3
    searcher = Searcher(store, static_embedder)
    for query, doc_id in (("a dog on the floor", "pets.md"), ("the interest rate of the bank", "money.md")):
        for mode in ("dense", "hybrid_weighted"):
            results = searcher.search(query, spec.name, k=2, mode=mode)
            assert results and results[0].doc_id == doc_id, (query, mode, results[:2])
    # rebuilding reuses the cached vectors of this model id (the static tier's own cache key)
    again = build_index(store, spec, static_embedder).as_metadata()
    assert again["embeddings_computed"] == 0


def test_dagster_assets_get_the_static_options_of_the_index_config(
    static_embedder, static_home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Dagster resource passes every `embedder:` option (vocabulary_size, pca_dims) on, and hands
    out the instance the query side uses: a dropped option would index with another model."""
    from chunkyard.assets.resources import EmbedderResource
    from chunkyard.retrieval.embedders.embedder import embedder_for_config

    config = IndexConfig(
        name="static-resource",
        chunker={"strategy": "token", "size": 64, "overlap": 0, "tokenizer": "words"},
        embedder=OPTIONS,
    )
    monkeypatch.setenv("CHUNKYARD_MODEL_DIR", str(static_home))
    from_dagster = EmbedderResource().for_config(config)
    assert from_dagster.model_id == static_embedder.model_id == "all-MiniLM-L6-v2@static-v4000"
    assert from_dagster is embedder_for_config(config)
    with pytest.raises(EmbedderConfigError, match="unknown option"):
        EmbedderResource().get(pooling="max")
