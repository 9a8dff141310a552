"""Analysis per document language: a mixed folder, queries under every analyzer present, Thai segmentation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.evalset import read_eval_set
from chunkyard.evaluation.datasets.types import Question, Span
from chunkyard.evaluation.metrics import hit_at_k
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.lexical.analysis import Analyzer, MultiAnalyzer, build_analyzer, shared_analyzer
from chunkyard.retrieval.lexical.languages import crosses_languages, language_analyzers
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.fusion import fuse
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import ParagraphChunker, make_spec, random_unit_vector_for

DATA = Path(__file__).parent / "data" / "multilingual"
MIXED = ("es", "en", "id", "uk", "th")


def _mixed_corpus() -> tuple[list[Document], dict[str, list[Question]]]:
    """Five languages' documents in one folder (ids `xx/name.md`) and each language's questions."""
    documents: list[Document] = []
    questions: dict[str, list[Question]] = {}
    for language in MIXED:
        own = [
            Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / language).glob("*.md"))
        ]
        asked = read_eval_set(DATA / f"{language}_questions.jsonl", own, on_missing="error").questions
        documents += [replace(doc, id=f"{language}/{doc.id}") for doc in own]
        questions[language] = [
            replace(q, references=[Span(f"{language}/{s.doc_id}", s.start, s.end) for s in q.references])
            for q in asked
        ]
    return documents, questions


def _bm25_hits(store: Store, embedder, analyzer: str) -> tuple[dict[str, float], dict]:
    """The mixed folder built with `analyzer` (random vectors: only BM25 scores) -> hit@5 per language, info."""
    documents, questions = _mixed_corpus()
    spec = make_spec(
        name=f"mix-{analyzer}", bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": analyzer}
    )
    store.documents.sync(spec.collection, documents, [])
    build_index(
        store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash, random_unit_vector_for())
    )
    searcher = Searcher(store, embedder)
    hits = {}
    for language, asked in questions.items():
        found = []
        for question in asked:
            results = searcher.search(question.text, spec.name, k=5, mode="bm25")
            retrieved = [Span(r.doc_id, r.start, r.end) for r in results]
            found.append(hit_at_k(retrieved, question.references, 5))
        hits[language] = 100 * sum(found) / len(found)
    info = store.indexes.info(spec.name)
    assert info is not None
    return hits, info


def test_a_mixed_folder_is_analysed_per_document_and_queries_match_every_language(
    store: Store, embedder
) -> None:
    auto, info = _bm25_hits(store, embedder, "auto")
    bm25 = info["config"]["bm25"]
    assert set(bm25["languages"]) == set(MIXED)
    assert bm25["analyzers"] == {
        "es": "spanish",
        "en": "english",
        "id": "indonesian",
        "uk": "ukrainian",
        "th": "thai",
    } | {lang: bm25["analyzers"][lang] for lang in bm25["languages"] if lang not in MIXED}
    assert info["analyzers"][0] == info["analyzer"] == bm25["resolved_analyzer"]
    assert set(info["analyzers"]) == {"spanish", "english", "indonesian", "ukrainian", "thai"}
    # one analyzer for the whole folder (what `auto` chose before: the largest language's)
    single, _ = _bm25_hits(store, embedder, info["analyzer"])
    assert all(auto[lang] >= single[lang] for lang in MIXED), (auto, single)
    assert sum(auto.values()) > sum(single.values()), (auto, single)
    assert min(auto.values()) >= 90.0, auto


def test_one_language_keeps_one_analyzer() -> None:
    assert language_analyzers({"en": 0.995, "fr": 0.005}) == {}  # below the share: the main analyzer
    assert language_analyzers({"id": 0.6, "ms": 0.4}) == {}  # both analysed as Indonesian
    english = build_analyzer({"analyzer": "auto", "resolved_analyzer": "english", "languages": {"en": 1.0}})
    assert english is shared_analyzer("english")


def test_query_terms_are_the_union_of_every_analyzer_once() -> None:
    multi = build_analyzer(
        {"analyzer": "auto", "resolved_analyzer": "spanish", "analyzers": {"es": "spanish", "en": "english"}}
    )
    assert isinstance(multi, MultiAnalyzer)
    spanish, english = Analyzer("spanish").analyze, Analyzer("english").analyze
    query = "the libraries of the city and las bibliotecas"
    terms = multi.analyze(query)
    assert terms[: len(spanish(query))] == spanish(query)  # the main analyzer's terms, repeats kept
    assert set(terms) == set(spanish(query)) | set(english(query))
    assert len(terms) == len(spanish(query)) + len(set(english(query)) - set(spanish(query)))


def test_thai_is_segmented_into_words() -> None:
    terms = Analyzer("thai").analyze("สวนผักชุมชนตั้งอยู่ที่ไหน ข้างสถานีรถประจำทาง Library")
    assert "ชุมชน" in terms and "สถานี" in terms and "library" in terms
    # without a segmenter the whole run between spaces is one term
    assert "ชุมชน" not in Analyzer("standard").analyze("สวนผักชุมชนตั้งอยู่ที่ไหน")


def test_thai_sara_am_survives_normalisation_in_documents_and_queries() -> None:
    # NFKC writes ำ as ํ + า; segmented apart, ผู้นำ ("leader") became ผู้ + นํา and matched nothing whole
    assert Analyzer("thai").analyze("ผู้นำ ของ ชุมชน") == ["ผู้นำ", "ของ", "ชุมชน"]
    assert Analyzer("thai").analyze("ผู้\u0e19\u0e4d\u0e32") == ["ผู้นำ"]  # typed decomposed, the same term


def test_hindi_also_is_a_stop_word_not_a_one_letter_stem() -> None:
    terms = Analyzer("hindi").analyze("राम भी आया और सीता भी")
    assert "भी" not in terms and "भ" not in terms and "राम" in terms


def test_cross_language_questions_rank_by_dense_alone_with_a_multilingual_model() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
    lexical = [("x", 9.0), ("c", 5.0)]  # BM25 matched a name or a number: noise in another language
    crossed = [cid for cid, _ in fuse("hybrid_auto", dense, lexical, 60, 0.5, 0.25, cross_language=True)]
    assert crossed == ["a", "b", "c", "x"]
    assert [cid for cid, _ in fuse("hybrid_auto", dense, lexical, 60, 0.5, 0.25)][0] == "x"
    e5 = {"embedding_model": "multilingual-e5-small"}
    assert crosses_languages("Where is the community garden?", {**e5, "bm25": {"languages": {"uk": 1.0}}})
    assert crosses_languages(
        "How many plots does the garden have?", {**e5, "bm25": {"languages": {"es": 1.0}}}
    )
    assert not crosses_languages(
        "¿Dónde está el huerto comunitario?", {**e5, "bm25": {"languages": {"es": 1.0}}}
    )
    assert not crosses_languages("Di mana kebun itu?", {**e5, "bm25": {"languages": {"id": 0.6, "ms": 0.4}}})
    # English at 0.23 only, but Vietnamese at 0.0003: crossing; Portuguese at 0.10 but Spanish at 0.085 is not
    assert crosses_languages("Love is blind.", {**e5, "bm25": {"languages": {"vi": 1.0}}})
    assert not crosses_languages("informe trimestral de ventas", {**e5, "bm25": {"languages": {"es": 1.0}}})
    mixed = {**e5, "bm25": {"languages": {"en": 0.5, "uk": 0.5}}}
    assert not crosses_languages("Where is the community garden?", mixed)
    assert not crosses_languages("Де міський город?", mixed)
    # an English-only model keeps today's fusion, and so does an index without detected languages
    minilm = {"embedding_model": "all-MiniLM-L6-v2", "bm25": {"languages": {"uk": 1.0}}}
    assert not crosses_languages("Where is the community garden?", minilm)
    assert not crosses_languages("Where is the community garden?", {**e5, "bm25": {}})
