"""Answers located precisely (issue 36): highlights per hit, the page or slide of the highlight, and
slides as their own chunks; on real PDFs and decks through the real model and Postgres."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.chunking import build_chunker
from chunkyard.chunking.documents.folder import load_folder
from chunkyard.chunking.locations import slide_cuts
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.highlights import find_highlights, sentence_spans, snippet
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.store.bm25 import build_analyzer

from benchmarks.located_set import DECKS, write_deck, write_pdf
from tests.located_index import build_located

ENGLISH = build_analyzer({"analyzer": "english"})


def test_sentences_and_lines_are_the_units_of_a_highlight() -> None:
    text = "Fees.\nA berth costs 2,60 $ per metre. Water is free!\n\n  Fuel at the pier"
    assert [text[s:e] for s, e in sentence_spans(text)] == [
        "Fees.",
        "A berth costs 2,60 $ per metre.",
        "Water is free!",
        "Fuel at the pier",
    ]


def test_the_best_sentence_is_highlighted_with_its_document_offsets_and_page() -> None:
    text = (
        "Mooring fees are charged per night.\nA berth costs 2,60 $ per metre.\n\nThe fuel dock closes at six."
    )
    start = 100  # the chunk's offset in its document; page 2 begins at the fuel dock's line
    breaks = [100 + text.index("The fuel")]
    metadata = {"page": 1, "page_end": 2, "page_breaks": breaks}
    terms = set(ENGLISH.analyze("When does the fuel dock close?"))
    found = find_highlights(text, start, metadata, terms, ENGLISH)
    assert found[0].text == "The fuel dock closes at six."
    assert (found[0].start, found[0].end) == (breaks[0], start + len(text))
    assert found[0].page == 2 and found[0].score == 3
    berth = find_highlights(text, start, metadata, set(ENGLISH.analyze("berth cost per metre")), ENGLISH)
    assert berth[0].text == "A berth costs 2,60 $ per metre." and berth[0].page == 1
    assert find_highlights(text, start, metadata, set(ENGLISH.analyze("glaciers")), ENGLISH) == []


def test_a_neighbour_adding_query_terms_joins_the_first_highlight() -> None:
    text = "The beacon upgrade ships in spring. Solar panels follow. The roof waits."
    found = find_highlights(text, 0, {}, set(ENGLISH.analyze("beacon upgrade and solar panels")), ENGLISH)
    assert found[0].text == "The beacon upgrade ships in spring. Solar panels follow."


def test_the_snippet_is_around_the_highlight_and_marks_its_cuts() -> None:
    text = ("Filler words. " * 40) + "The answer is 472 consultas." + (" More words." * 40)
    found = find_highlights(text, 0, {}, set(ENGLISH.analyze("how many consultas")), ENGLISH)
    shown = snippet(text, 0, found[0], width=120)
    assert "The answer is 472 consultas." in shown
    assert shown.startswith("...") and shown.endswith("...") and len(shown) < 140
    assert snippet("short text", 0, None) == "short text"
    long = "The answer " + "goes on and on " * 40 + "until it ends."
    (whole,) = find_highlights(long, 0, {}, set(ENGLISH.analyze("answer")), ENGLISH)
    assert whole.text == long and snippet(long, 0, whole, width=100).startswith("The answer goes on")
    assert len(snippet(long, 0, whole, width=100)) <= 110


def test_slides_are_cut_apart_unless_tiny() -> None:
    text = "Title\n\nThe beacon upgrade ships in spring and solar panels follow.\n\nThe roof repair costs 18,000 euros in all.\n\nQ?"
    starts = [0, text.index("The beacon"), text.index("The roof"), text.index("Q?")]
    spans = [text[s:e].strip() for s, e in slide_cuts(text, 0, len(text), starts)]
    # the tiny title slide stays with the slide after it, the tiny last one with the slide before it
    assert spans == [
        "Title\n\nThe beacon upgrade ships in spring and solar panels follow.",
        "The roof repair costs 18,000 euros in all.\n\nQ?",
    ]


def test_each_slide_is_a_chunk_carrying_the_decks_title(tmp_path: Path) -> None:
    write_deck(tmp_path / "deck.pptx", DECKS["crew-training.pptx"])
    (doc,), _ = load_folder(tmp_path)
    chunks = build_chunker({"strategy": "recursive", "size": 256, "tokenizer": "model"}).chunk(doc)
    assert [(c.metadata["slide"], c.metadata["slide_end"]) for c in chunks] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
    ]
    assert all(c.metadata["deck_title"] == "Crew training" for c in chunks)
    assert chunks[1].embed_text.startswith("Crew training\n\n") and chunks[1].text.startswith("Knots")
    assert chunks[0].embed_text == chunks[0].text  # it starts with the title already


def test_a_chunk_crossing_pages_knows_where_each_page_begins(tmp_path: Path) -> None:
    write_pdf(tmp_path / "guide.pdf", ["First page text.", "Second page text.", "Third page text."])
    (doc,), _ = load_folder(tmp_path)
    (chunk,) = build_chunker({"strategy": "recursive", "size": 256, "tokenizer": "model"}).chunk(doc)
    assert (chunk.metadata["page"], chunk.metadata["page_end"]) == (1, 3)
    assert chunk.metadata["page_breaks"] == doc.metadata["page_starts"][1:]


@pytest.fixture(scope="module")
def located(store, embedder, tmp_path_factory) -> tuple[Searcher, str, list]:
    index, questions = build_located(store, embedder, tmp_path_factory.mktemp("located"))
    return Searcher(store, embedder), index, questions


def test_hits_report_the_page_or_slide_of_their_highlight(located) -> None:
    searcher, index, questions = located
    for q in questions:
        hit = next(h for h in searcher.search(q.question, index, k=5) if h.doc_id == q.doc)
        reported = hit.page if q.unit == "page" else hit.slide
        assert reported == q.number, (q.question, hit.highlights)
        assert q.answer in " ".join(hit.highlights[0].text.split()), (q.question, hit.highlights)
        assert q.answer in hit.snippet
    # the cases: the answer on page 2 of a PDF whose pages are one chunk, a deck's slide 2
    berth = searcher.search("How much does a berth cost per metre?", index, k=1)[0]
    assert (berth.metadata["page"], berth.metadata["page_end"], berth.page) == (1, 3, 2)
    beacon = searcher.search("When does the beacon upgrade ship?", index, k=1)[0]
    assert beacon.doc_id == "lighthouse-review.pptx" and beacon.slide == 2
    assert beacon.metadata["deck_title"] == "Lighthouse review"


def test_highlights_can_be_turned_off_and_survive_the_json_round_trip(located) -> None:
    searcher, index, _ = located
    (hit,) = searcher.search("When does the fuel dock close in winter?", index, k=1)
    again = SearchResult.from_dict(hit.as_dict())
    assert again.highlights == hit.highlights and again.page == hit.page == 3
    (plain,) = searcher.search("When does the fuel dock close in winter?", index, k=1, highlights=False)
    assert plain.highlights == [] and plain.snippet == "" and "highlight_ms" not in plain.timings
    assert plain.chunk_id == hit.chunk_id


def test_chunkyard_search_shows_the_snippet_and_the_highlights_page() -> None:
    from chunkyard.orchestration.cli_search import shown, where
    from chunkyard.retrieval.query.highlights import Highlight

    mark = Highlight(60, 91, "A berth costs 2,60 $ per metre.", 3.0, page=2)
    hit = SearchResult(
        chunk_id="c",
        doc_id="guide.pdf",
        start=0,
        end=120,
        text="x" * 120,
        metadata={"page": 1, "page_end": 3, "page_breaks": [50, 100]},
        scores={},
        rank=1,
        highlights=[mark],
        snippet="Mooring fees. A berth costs 2,60 $ per metre. Water",
        page=2,
    )
    assert where(hit) == " (pages 1-3, highlight on page 2)"
    assert shown(hit) == hit.snippet
    assert shown(hit, bold=True) == "Mooring fees. \033[1mA berth costs 2,60 $ per metre.\033[0m Water"
    plain = SearchResult("c", "notes.md", 0, 5, "short", {}, {}, 1)
    assert where(plain) == "" and shown(plain) == "short"
