"""`max_llm_tokens`: chunks sized in the embedding model's tokens and also held to a cap in cl100k tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.chunking import build_chunker
from chunkyard.chunking.base import ChunkerConfigError
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.squad import load_squad
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import make_spec

ROOT = Path(__file__).resolve().parents[1]
CL100K = get_tokenizer("cl100k")
E5 = {
    "strategy": "recursive",
    "size": 256,
    "overlap": 0,
    "tokenizer": "model",
    "model": "multilingual-e5-small",
}


def test_thai_chunks_fit_the_cap_and_english_ones_do_not_change() -> None:
    """Thai text costs cl100k about 3.7 times English, so 256 e5 tokens run past 800 cl100k tokens;
    the cap splits those chunks into even parts at whitespace, and leaves English chunks alone."""
    thai = load_squad(ROOT / "evaluation" / "datasets" / "iapp_thai_wiki_qa_test_sample.json").documents
    plain, capped = build_chunker(E5), build_chunker({**E5, "max_llm_tokens": 320})
    before = [c for doc in thai for c in plain.chunk(doc)]
    after = [c for doc in thai for c in capped.chunk(doc)]
    texts = {doc.id: doc.text for doc in thai}
    assert max(CL100K.count(c.text) for c in before) > 320
    assert len(after) > len(before)
    for chunk in after:
        assert chunk.text == texts[chunk.doc_id][chunk.start : chunk.end]
        assert CL100K.count(chunk.text) <= 320 and chunk.token_count <= 256
    split = [c for c in after if c.metadata.get("llm_cap")]
    assert split and min(CL100K.count(c.text) for c in split) > 320 // 4  # even parts, no crumbs
    english = Document("guide.md", (ROOT / "docs" / "chunking.md").read_text(encoding="utf-8"))
    assert [(c.start, c.end) for c in capped.chunk(english)] == [
        (c.start, c.end) for c in plain.chunk(english)
    ]


@pytest.mark.parametrize(("value", "message"), [(8, "must be >= 16"), ("320", "expected an integer")])
def test_a_bad_cap_names_the_field(value: object, message: str) -> None:
    with pytest.raises(ChunkerConfigError, match=f"^chunker.max_llm_tokens: {message}"):
        build_chunker({**E5, "max_llm_tokens": value})


def test_an_index_config_with_the_cap_builds_and_serves(store: Store, embedder) -> None:
    """Real model, chunker and Postgres: the indexed chunks hold the cap and searches return them."""
    docs = [
        Document(p.name, p.read_text(encoding="utf-8"))
        for p in sorted((ROOT / "tests" / "data" / "multilingual" / "hi").glob("*.md"))
    ]
    config = IndexConfig(
        name="recursive-128-cap",
        chunker={
            "strategy": "recursive",
            "size": 128,
            "overlap": 0,
            "tokenizer": "model",
            "max_llm_tokens": 64,
        },
        bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "auto"},
    )
    spec = IndexSpec(make_spec().collection, config)
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder)
    results = Searcher(store, embedder).search("सामुदायिक बगीचा", spec.name, k=5)
    assert results and all(CL100K.count(r.text) <= 64 for r in results)
