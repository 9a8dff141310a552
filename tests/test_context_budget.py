"""`max_context_tokens`: results trimmed to a budget in the LLM's (cl100k) tokens, spans still exact."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.retrieval.lexical.analysis import shared_analyzer
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.budget import best_span, fit_to_budget
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import SearchOptions
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import GARDEN_TEXT, garden_index, multilingual_index

DATA = Path(__file__).parent / "data" / "multilingual"
CL100K = get_tokenizer("cl100k_base")
NAMES = ("huerto.md", "tren.md", "biblioteca.md")


def _result(doc: str, start: int, end: int, rank: int) -> SearchResult:
    return SearchResult(f"c{rank}", "d", start, end, doc[start:end], {}, {}, rank)


def test_whole_results_while_they_fit_then_the_best_sentences() -> None:
    doc = (
        "Trains leave every hour. The coastal train links the fishing port to the capital in fifty "
        "minutes. Night trains run on Fridays in summer. Tickets are sold at the kiosk.\n\n"
        "The library opens at nine. Its reading room has forty seats and a map collection. "
        "The community garden is near the bus station and has forty wooden beds."
    )
    split = doc.index("The library")
    results = [_result(doc, 0, split - 2, 1), _result(doc, split, len(doc), 2)]
    first = CL100K.count(results[0].text)
    budget = first + 20
    analyzer = shared_analyzer("english")
    kept = fit_to_budget(results, "where is the community garden", analyzer, budget, CL100K)
    assert [r.rank for r in kept] == [1, 2]
    assert "trimmed" not in kept[0].scores and kept[0].scores["llm_tokens"] == first
    assert kept[1].scores["trimmed"] == 1.0
    assert kept[1].text == doc[kept[1].start : kept[1].end]
    assert "community garden" in kept[1].text and "reading room" not in kept[1].text
    assert sum(CL100K.count(r.text) for r in kept) <= budget


def test_the_top_result_cut_to_fit_keeps_up_to_half_the_budget() -> None:
    """Its best line alone is a heading; half the budget holds the sentences after it too."""
    doc = (
        "# Coastal trains\n\nThe coastal train links the fishing port to the capital in fifty minutes. "
        "Coastal trains were refitted in 2019 with wider seats and sockets. Night trains run on Fridays. "
        "Bicycles travel free in the last coach of the coastal train when booked ahead. "
        "The coastal line closes for repairs every February.\n\n"
        + "".join(f"Other town news item {i} is about the market and the library. " for i in range(40))
    )
    results = [_result(doc, 0, 900, 1)] + [_result(doc, 900 + 60 * i, 960 + 60 * i, i + 2) for i in range(4)]
    analyzer = shared_analyzer("english")
    budget = 100
    kept = fit_to_budget(results, "coastal train", analyzer, budget, CL100K)
    top = kept[0]
    assert top.rank == 1 and top.scores["trimmed"] == 1.0 and top.text == doc[top.start : top.end]
    assert budget // len(results) < top.scores["llm_tokens"] <= budget // 2
    assert "coastal train links" in top.text
    assert sum(r.scores["llm_tokens"] for r in kept) <= budget


def test_tokens_the_first_pass_leaves_go_back_to_the_cut_result() -> None:
    """The top result is cut to half the budget and the next one is short and kept whole: the half it
    did not use goes back to the top result, a whole sentence at a time, within the budget."""
    doc = (
        "# Coastal trains\n\nThe coastal train links the fishing port to the capital in fifty minutes. "
        "Coastal trains were refitted in 2019 with wider seats and sockets. Night trains run on Fridays. "
        "Bicycles travel free in the last coach of the coastal train when booked ahead. "
        "The coastal line closes for repairs every February. Coastal train tickets are sold on board. "
        "Dogs ride the coastal train for half the fare. The coastal timetable changes in May.\n\n"
        "Market news."
    )
    split = doc.index("Market news")
    results = [_result(doc, 0, split - 2, 1), _result(doc, split, len(doc), 2)]
    analyzer = shared_analyzer("english")
    budget = 70
    assert CL100K.count(results[0].text) > budget
    kept = fit_to_budget(results, "coastal train", analyzer, budget, CL100K)
    top, short = kept
    assert top.scores["trimmed"] == 1.0 and top.text == doc[top.start : top.end]
    assert "trimmed" not in short.scores
    assert top.scores["llm_tokens"] > budget // 2  # the first pass alone stops at half
    assert top.scores["llm_tokens"] == CL100K.count(top.text)
    assert sum(r.scores["llm_tokens"] for r in kept) <= budget
    # what is still left is less than the next sentence on either side of the top result's cut
    left = budget - sum(r.scores["llm_tokens"] for r in kept)
    tail = doc[top.end : split - 2].strip()
    head = doc[: top.start].strip()
    assert not tail or CL100K.count(tail.split(". ")[0] + ".") > left
    assert not head or CL100K.count(head.split(". ")[-1]) > left


def test_a_sentence_longer_than_the_budget_is_cut_inside_the_document() -> None:
    text = "ธารน้ำแข็งกัดเซาะหุบเขาลึก ขณะที่เคลื่อนตัวลงอย่างช้าๆ เป็นเวลาหลายพันปี"
    analyzer = shared_analyzer("thai")
    wanted = set(analyzer("หุบเขา"))
    for budget in (1, 2, 4, 8, 20):
        span = best_span(text, wanted, analyzer, budget, CL100K)
        if span is None:  # not even one character fits (a Thai letter is 1-3 cl100k tokens)
            assert budget < 4
            continue
        assert 0 < CL100K.count(text[span[0] : span[1]]) <= budget
    span = best_span(text, wanted, analyzer, 20, CL100K)
    assert span is not None and "หุบเขา" in text[span[0] : span[1]]


def test_the_option_is_checked_and_reaches_the_command_line() -> None:
    with pytest.raises(SearchError, match="max_context_tokens"):
        SearchOptions(max_context_tokens=0)
    with pytest.raises(SearchError, match="llm_tokenizer"):
        SearchOptions(
            llm_tokenizer="../gpt-9.json"
        )  # a name, never a path (tests/test_llm_tokenizer_files.py)
    parser = argparse.ArgumentParser()
    SearchOptions.add_arguments(parser)
    given = SearchOptions.from_arguments(parser.parse_args(["--max-context-tokens", "300"]))
    assert given.max_context_tokens == 300 and given.llm_tokenizer is None


@pytest.mark.parametrize("language", ["en", "hi", "th"])
def test_results_fit_the_budget_in_cl100k_tokens_with_exact_spans(
    store: Store, embedder, language: str
) -> None:
    """Real model, real recursive chunker and Postgres; a Hindi or Thai chunk costs cl100k far more
    tokens than the model's, so the budget trims there first."""
    spec, texts = multilingual_index(store, embedder, language, "recursive-96")
    records = [json.loads(line) for line in (DATA / f"{language}_questions.jsonl").open(encoding="utf-8")]
    questions = [r["question"] for r in records if r["references"][0]["document"] in NAMES]
    searcher = Searcher(store, embedder)
    for question in questions[:4]:
        whole = searcher.search(question, spec.name, k=5)
        assert whole
        whole_tokens = sum(CL100K.count(r.text) for r in whole)
        for budget in (24, 80, whole_tokens - 1, whole_tokens):
            served = searcher.search(question, spec.name, k=5, max_context_tokens=budget)
            assert served, (question, budget)
            assert sum(CL100K.count(r.text) for r in served) <= budget
            for result in served:
                assert result.text == texts[result.doc_id][result.start : result.end]
                assert result.scores["llm_tokens"] == CL100K.count(result.text)
                # what a reader is shown with a trimmed hit comes from its cut text
                assert all(result.start <= h.start and h.end <= result.end for h in result.highlights)
                shown = result.snippet.removeprefix("...").removesuffix("...")
                assert shown and shown in " ".join(result.text.split())
            assert [r.chunk_id for r in served] == [r.chunk_id for r in whole[: len(served)]]
        untouched = searcher.search(question, spec.name, k=5, max_context_tokens=whole_tokens)
        assert [(r.start, r.end) for r in untouched] == [(r.start, r.end) for r in whole]


def test_the_http_api_trims_to_the_budget_and_rejects_a_bad_one(store: Store, embedder) -> None:
    from chunkyard.retrieval.api.service import create_app
    from fastapi.testclient import TestClient

    spec, text = garden_index(store, embedder), GARDEN_TEXT
    http = TestClient(create_app(Searcher(store, embedder)), raise_server_exceptions=False)
    body = {"query": "where is the community garden", "index": spec.name, "k": 2, "mode": "bm25"}
    results = http.post("/v1/search", json={**body, "max_context_tokens": 20}).json()["results"]
    assert results and sum(CL100K.count(r["text"]) for r in results) <= 20
    assert "community garden" in results[0]["text"]
    assert all(r["text"] == text[r["start"] : r["end"]] for r in results)
    bad = http.post("/v1/search", json={**body, "max_context_tokens": 0})
    assert bad.status_code == 422 and "max_context_tokens" in bad.text
