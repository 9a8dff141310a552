"""A question's stop words never give a code file its score (issue 38), even in an index whose analyzer
keeps stop words (`standard`): on the real Postgres with the real model."""

from __future__ import annotations

from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.lexical.code_terms import code_terms
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

CODE = (
    "def what_is_the_value(of_the_item):\n"
    "    # what is the value of the item, if it is there\n"
    "    return of_the_item if the_item is not None else what\n"
)


def test_code_terms_drop_english_stop_words() -> None:
    assert code_terms(["what", "is", "the", "value", "of", "item", "what_is_the_value"]) == [
        "value",
        "item",
        "what_is_the_value",
    ]


def test_a_code_file_gets_no_score_from_a_questions_stop_words(store, embedder) -> None:
    docs = [
        Document("zoo.md", "The walrus diet is clams and other shellfish from the sea floor."),
        Document("values.py", CODE, "text/x-python", metadata={"language": "py"}),
        Document("ferry.md", "The ferry leaves at noon from pier four."),
    ]
    spec = IndexSpec(
        "stopwords-code",
        IndexConfig(
            name="std",
            chunker={"strategy": "recursive", "size": 64, "tokenizer": "model"},
            bm25={"analyzer": "standard"},
        ),
    )
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder)
    searcher = Searcher(store, embedder)
    found = [
        r.doc_id for r in searcher.search("What is the diet of the walrus?", str(spec.name), k=3, mode="bm25")
    ]
    assert found[0] == "zoo.md" and "values.py" not in found  # prose keeps its analyzer's terms
    assert "values.py" in [r.doc_id for r in searcher.search("item value", str(spec.name), k=3, mode="bm25")]
