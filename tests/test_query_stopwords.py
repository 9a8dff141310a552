"""A query's stop words never give a document its score (issue 38): code and mixed folders, whose chunks
may be analysed without stop words, on the real Postgres with the real model."""

from __future__ import annotations

from chunkyard.chunking.types import Document
from chunkyard.retrieval.analysis import MultiAnalyzer, shared_analyzer
from chunkyard.retrieval.config import IndexConfig, IndexSpec
from chunkyard.retrieval.indexing import build_index
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query_terms import QueryTerms

QUESTION = "What is the diet of the walrus?"


def test_query_terms_drop_stop_words_under_every_analyzer() -> None:
    mixed = MultiAnalyzer([shared_analyzer("english"), shared_analyzer(None)])
    assert {"what", "is", "the", "of"} <= set(mixed.analyze(QUESTION))  # what the index reads
    assert QueryTerms(mixed).analyze(QUESTION) == ["diet", "walrus"]
    assert QueryTerms(shared_analyzer(None)).analyze(QUESTION) == ["diet", "walrus"]
    assert QueryTerms(shared_analyzer("english")).analyze(QUESTION) == ["diet", "walrus"]
    spanish = QueryTerms(MultiAnalyzer([shared_analyzer("spanish"), shared_analyzer(None)]))
    assert spanish.analyze("¿Cuál es la dieta de la morsa?") == ["diet", "mors", "dieta", "morsa"]
    kept = QueryTerms(shared_analyzer("english", stopwords=False))  # asked for: stop words stay
    assert "the" in kept.analyze(QUESTION)


def test_a_code_file_gets_no_score_from_a_questions_stop_words(store, embedder) -> None:
    code = (
        "def what_is_the_value(of_the_item):\n"
        "    # what is the value of the item, if it is there\n"
        "    return of_the_item if the_item is not None else what\n"
    )
    docs = [
        Document("zoo.md", "The walrus diet is clams and other shellfish from the sea floor."),
        Document("values.py", code, "text/x-python", metadata={"language": "py"}),
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
    results = Searcher(store, embedder).search(QUESTION, str(spec.name), k=3, mode="bm25")
    assert [r.doc_id for r in results] == ["zoo.md"]  # values.py holds only the stop words
    assert Searcher(store, embedder).search("what is the", str(spec.name), k=3, mode="bm25") == []
