"""Long-document levers on a real index (Postgres, all-MiniLM-L6-v2): BM25 pseudo-relevance feedback,
small-to-big sections, budget trimming seeded by the highlights."""

from __future__ import annotations

import uuid

import pytest
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.lexical.analysis import shared_analyzer
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.budget import MIN_PIECE_TOKENS, fit_to_budget
from chunkyard.retrieval.query.feedback import expansion_terms, feedback_query
from chunkyard.retrieval.query.highlights import add_highlights
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.query.sections import section_span
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import SearchOptions
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import ParagraphChunker

CL100K = get_tokenizer("cl100k_base")
ENGLISH = shared_analyzer("english")
HARBOUR = (
    "# Harbour\n\n"
    "The old harbour shelters the fishing fleet behind a stone breakwater.\n\n"
    "## Ferries\n\n"
    "Ferries to the islands leave from the east pier every morning at seven.\n\n"
    "The ferry crossing takes forty minutes; tickets are sold on board.\n\n"
    "## Lighthouse\n\n"
    "A red lighthouse marks the end of the breakwater and flashes every ten seconds.\n\n"
    "Its keeper's cottage is now a small museum of shipwrecks.\n"
)
MILL = (
    "# Mill\n\n"
    "The watermill grinds spelt and rye for the village bakery.\n\n"
    "Its wheel turns on the mill race, a channel dug from the river.\n\n"
    "Bakery loaves made from the mill's rye flour are sold on Saturdays.\n"
)
DOCUMENTS = {"harbour.md": HARBOUR, "mill.md": MILL}


@pytest.fixture(scope="module")
def index(store: Store, embedder) -> IndexSpec:
    collection = f"lever{uuid.uuid4().hex[:8]}"
    store.documents.sync(collection, [Document(d, t) for d, t in DOCUMENTS.items()], [])
    config = IndexConfig(
        name="paragraphs",
        chunker={"strategy": "paragraph-test"},
        bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"},
        hybrid={"weight": 0.5, "candidates": 50},
    )
    spec = IndexSpec(collection, config)
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec


def test_expansion_terms_come_from_the_top_chunks_weighted_by_rank_and_idf() -> None:
    texts = ["watermill grinds rye rye", "bakery rye"]
    found = expansion_terms(["watermil"], texts, ENGLISH, None, n_terms=2)
    assert found[0] == "rye" and "watermil" not in found
    # a common term (idf 0) never joins the query
    assert "rye" not in expansion_terms(
        ["watermil"], texts, ENGLISH, {"rye": 0.0, "grind": 1.0, "bakeri": 1.0}
    )
    assert feedback_query(["a", "b"], ["c"]) == ["a", "a", "b", "b", "c"]


@pytest.mark.parametrize("backend", ["memory", "sql"])
def test_bm25_feedback_reaches_a_chunk_holding_only_the_expansion_terms(
    store: Store, embedder, index: IndexSpec, backend: str
) -> None:
    searcher = Searcher(store, embedder, bm25_backend=backend)
    if backend == "memory":
        searcher.warm(index.name)
    query = "What does the watermill grind?"
    plain = searcher.search(query, index.name, mode="bm25", k=5)
    expanded = searcher.search(query, index.name, mode="bm25", k=5, bm25_feedback=True)
    assert [r.doc_id for r in plain] == ["mill.md"]  # only the chunk naming the watermill
    loaves = [r for r in expanded if "Bakery loaves" in r.text]
    assert loaves and expanded[0].chunk_id == plain[0].chunk_id  # the original hit keeps its place
    # nothing found, nothing expanded: no error, an empty list
    assert searcher.search("zeppelin", index.name, mode="bm25", k=5, bm25_feedback=True) == []


def test_section_span_is_the_heading_section_within_the_cap() -> None:
    start = HARBOUR.index("The ferry crossing")
    chunk = (start, HARBOUR.index("\n", start))
    lo, hi = section_span(HARBOUR, chunk, 200, CL100K)
    assert HARBOUR[lo:hi].startswith("## Ferries") and HARBOUR[lo:hi].endswith("sold on board.")
    # a cap below the section keeps the chunk's paragraph and grows by whole paragraphs
    lo, hi = section_span(HARBOUR, chunk, CL100K.count(HARBOUR[chunk[0] : chunk[1]]) + 1, CL100K)
    assert (lo, hi) == chunk
    lo, hi = section_span(MILL, (MILL.index("Its wheel"), MILL.index("river.") + 6), 1000, CL100K)
    assert (lo, hi) == (0, len(MILL.rstrip()))  # the whole (one-heading) document fits


def test_section_tokens_returns_exact_sections_one_per_section(
    store: Store, embedder, index: IndexSpec
) -> None:
    searcher = Searcher(store, embedder)
    results = searcher.search("How long is the ferry crossing?", index.name, k=3, section_tokens=200)
    assert results and results[0].text.startswith("## Ferries")
    spans = [(r.doc_id, r.start, r.end) for r in results]
    for r in results:
        assert r.text == DOCUMENTS[r.doc_id][r.start : r.end]
        assert CL100K.count(r.text) <= 200
        matched = r.metadata.get("matched_span")
        if matched is not None:
            assert r.start <= matched[0] < matched[1] <= r.end
    for i, (doc, s, e) in enumerate(spans):  # no two results share text
        assert all(doc != d or e <= s2 or e2 <= s for d, s2, e2 in spans[i + 1 :])
    assert [r.rank for r in results] == list(range(1, len(results) + 1))
    with pytest.raises(SearchError, match="section_tokens"):
        SearchOptions(section_tokens=0)


def test_budget_trimming_starts_from_the_first_highlight() -> None:
    doc = (
        "Ferries leave at seven. The crossing is calm in summer. Dogs travel free on every crossing. "
        "Tickets for the island ferry are sold on board. The purser sells them for cash only."
    )
    query = "where are ferry tickets sold"
    lead = "The harbour is old."
    first = SearchResult("c0", "d0", 0, len(lead), lead, {}, {}, 1)
    second = SearchResult("c1", "d", 0, len(doc), doc, {}, {}, 2)
    add_highlights([second], ENGLISH(query), ENGLISH)
    assert second.highlights and "Tickets" in second.highlights[0].text
    budget = CL100K.count(lead) + max(MIN_PIECE_TOKENS, CL100K.count(second.highlights[0].text)) + 1
    kept = fit_to_budget([first, second], query, ENGLISH, budget, CL100K)
    assert [r.chunk_id for r in kept] == ["c0", "c1"] and kept[1].scores["trimmed"] == 1.0
    assert second.highlights[0].text in kept[1].text and kept[1].text == doc[kept[1].start : kept[1].end]
    assert sum(r.scores["llm_tokens"] for r in kept) <= budget


def test_trust_dense_is_an_option_with_an_index_default() -> None:
    from chunkyard.retrieval.settings.index_defaults import IndexDefaults

    on = IndexDefaults.from_config({"hybrid": {"trust_dense": True}}, "demo/x")
    off = IndexDefaults.from_config({}, "demo/x")
    assert on.trust_dense and not off.trust_dense
    assert SearchOptions().resolve(on, "demo/x").trust_dense
    assert not SearchOptions(trust_dense=False).resolve(on, "demo/x").trust_dense
    assert SearchOptions(trust_dense=True).resolve(off, "demo/x").trust_dense
