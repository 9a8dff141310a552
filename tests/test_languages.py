"""Language handling: detection, analyzers per language, `analyzer: auto` on small Spanish and Indonesian sets."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.evalset import read_eval_set
from chunkyard.evaluation.datasets.types import Span
from chunkyard.evaluation.metrics import hit_at_k
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.lexical.analysis import Analyzer, UkrainianStemmer, analyzer_name, build_analyzer
from chunkyard.retrieval.lexical.languages import choose_analyzer, detect_language
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import SettingsError, load_index_configs
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import ParagraphChunker, make_spec, random_unit_vector_for

DATA = Path(__file__).parent / "data" / "multilingual"


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("The library opens at nine and closes early on Sundays.", "en"),
        ("La biblioteca abre a las nueve y cierra temprano los domingos.", "es"),
        ("Perpustakaan buka pukul sembilan dan tutup lebih awal pada hari Minggu.", "id"),
        ("Бібліотека відчиняється о дев'ятій і рано зачиняється в неділю.", "uk"),
        ("Библиотека открывается в девять и рано закрывается по воскресеньям.", "ru"),
        ("图书馆九点开门，星期天提前关门。", "zh"),
        ("12 345 -- ()", ""),
    ],
)
def test_detect_language(text: str, language: str) -> None:
    assert detect_language(text).language == language


def test_choose_analyzer_by_text_share_and_english_when_unknown() -> None:
    assert choose_analyzer({"es": 900, "en": 300})[0] == "spanish"
    assert choose_analyzer({"id": 300, "ms": 300, "en": 500})[0] == "indonesian"  # Malay votes Indonesian
    assert choose_analyzer({"zh": 800, "en": 100})[0] == "standard"
    assert choose_analyzer({"": 500})[0] == "english"
    assert choose_analyzer({"en": 100, "es": 100})[0] == "english"  # a tie keeps English
    assert choose_analyzer({"es": 3, "en": 1})[1] == {"es": 0.75, "en": 0.25}


def test_spanish_question_words_are_stop_words_with_and_without_accents() -> None:
    analyzer = Analyzer("spanish")
    for word in (
        "cuál",
        "quién",
        "cuándo",
        "cómo",
        "dónde",
        "qué",
        "cual",
        "quien",
        "cuando",
        "como",
        "donde",
    ):
        assert analyzer.analyze(word) == [], word
    assert analyzer.analyze("¿Dónde está la estación?") == analyzer.analyze("estaciones")


@pytest.mark.parametrize(
    ("language", "question", "content_words"),
    [
        ("indonesian", "Kapan perpustakaan itu dibuka?", 2),
        ("russian", "Когда и где открывается библиотека?", 2),
        ("ukrainian", "Коли і де відчиняється бібліотека?", 2),
    ],
)
def test_analyzers_drop_question_words(language: str, question: str, content_words: int) -> None:
    assert len(Analyzer(language).analyze(question)) == content_words


def test_analyzers_conflate_inflections() -> None:
    assert len({Analyzer("indonesian").analyze(w)[0] for w in ("pustaka", "perpustakaan")}) == 1
    assert len({Analyzer("russian").analyze(w)[0] for w in ("города", "городом", "городах")}) == 1
    assert len({Analyzer("ukrainian").analyze(w)[0] for w in ("міста", "містом", "містах", "місто")}) == 1


def test_ukrainian_apostrophes_and_reflexive_verbs() -> None:
    analyzer = Analyzer("ukrainian")
    assert analyzer.analyze("дев'ять") == analyzer.analyze("дев’ять") == analyzer.analyze("девʼять")
    assert UkrainianStemmer().stemWord("зачиняється") == UkrainianStemmer().stemWord("зачиняє")


def test_every_snowball_language_has_an_analyzer_with_stop_words_where_a_list_exists() -> None:
    """German, Turkish, Arabic, Hindi, French ... stem and drop function words; auto maps their codes."""
    from chunkyard.retrieval.lexical.analysis import SNOWBALL_LANGUAGES
    from chunkyard.retrieval.lexical.languages import analyzer_for_language

    for language in SNOWBALL_LANGUAGES:
        assert Analyzer(language).analyze("") == []  # every one builds
    german = Analyzer("german")
    assert german.analyze("Die Gletscher formten die Täler") == german.analyze("Gletscher formt Tal")
    assert len({Analyzer("turkish").analyze(w)[0] for w in ("vadi", "vadiler", "vadileri")}) == 1
    assert Analyzer("french").analyze("le la les des") == []
    assert Analyzer("arabic").analyze("في من على") == []
    assert {analyzer_for_language(c) for c in ("de", "tr", "ar", "hi", "fr")} == {
        "german",
        "turkish",
        "arabic",
        "hindi",
        "french",
    }
    assert choose_analyzer({"de": 900, "en": 100})[0] == "german"


def test_words_keep_their_vowel_signs() -> None:
    """Devanagari vowel signs are combining marks, which Python's \\w leaves out: a word must not be cut
    at each of them (हिमनद was ह + मनद)."""
    assert Analyzer("hindi").analyze("हिमनद घाटियाँ बनाते हैं") == ["हिमनद", "घाट", "बन"]
    assert "हिमनद" in Analyzer("hindi").analyze("हिमनद")


def test_english_analyzer_unchanged() -> None:
    assert Analyzer("english").analyze("The running dogs were barking at the cats") == [
        "run",
        "dog",
        "bark",
        "cat",
    ]
    assert build_analyzer({"analyzer": "english"}).name == "english"


def test_auto_resolves_to_the_published_choice_and_english_before_any_build() -> None:
    assert build_analyzer({"analyzer": "auto", "resolved_analyzer": "spanish"}).name == "spanish"
    assert build_analyzer({}).name == "english"
    assert analyzer_name({"analyzer": {"language": "russian", "stem": False}}) == "russian"


@pytest.mark.parametrize(
    ("bm25", "message"),
    [
        ("{analyzer: klingon}", "bm25.analyzer: unknown language 'klingon'"),
        ("{analyzer: {language: spanish, stem: maybe}}", "bm25.analyzer.stem"),
        ("{analyzer: auto, resolved_analyzer: spanish}", "bm25: unknown field"),
        ("{k1: -1}", "bm25: need k1 >= 0"),
    ],
)
def test_config_rejects_bad_bm25_settings(tmp_path: Path, bm25: str, message: str) -> None:
    path = tmp_path / "indexes.yaml"
    path.write_text(f"indexes:\n  x:\n    chunker: {{strategy: token, size: 64}}\n    bm25: {bm25}\n")
    with pytest.raises(SettingsError, match=r"indexes\.x\.bm25") as error:
        load_index_configs(path)
    assert message in str(error.value)


def _documents(language: str) -> list[Document]:
    return [Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / language).glob("*.md"))]


def _hits(store: Store, embedder, language: str, analyzer: str) -> tuple[float, float, dict]:
    """Build the language's corpus with `analyzer` (random vectors: only BM25 is scored) -> hit@5, hit@1, info."""
    docs = _documents(language)
    spec = make_spec(
        name=f"ml-{analyzer}", bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": analyzer}
    )
    store.documents.sync(spec.collection, docs, [])
    chunker = ParagraphChunker(spec.config.config_hash, vector_for=random_unit_vector_for())
    build_index(store, spec, embedder, chunker=chunker)
    questions = read_eval_set(DATA / f"{language}_questions.jsonl", docs, on_missing="error").questions
    assert len(questions) >= 10
    searcher = Searcher(store, embedder)
    hits, firsts = [], []
    for question in questions:
        results = searcher.search(question.text, spec.name, k=5, mode="bm25")
        retrieved = [Span(r.doc_id, r.start, r.end) for r in results]
        hits.append(hit_at_k(retrieved, question.references, 5))
        firsts.append(hit_at_k(retrieved, question.references, 1))
    info = store.indexes.info(spec.name)
    assert info is not None
    with store.connection() as conn:
        languages = {
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT metadata->>'text_language' FROM chunks WHERE index_name = %s", (spec.name,)
            )
        }
    info["chunk_languages"] = languages
    return 100 * sum(hits) / len(hits), 100 * sum(firsts) / len(firsts), info


@pytest.mark.parametrize(("language", "expected"), [("es", "spanish"), ("id", "indonesian")])
def test_auto_picks_the_collection_language_and_is_no_worse_than_english(
    store: Store, embedder, language: str, expected: str
) -> None:
    auto, auto_first, info = _hits(store, embedder, language, "auto")
    english, english_first, _ = _hits(store, embedder, language, "english")
    bm25 = info["config"]["bm25"]
    assert bm25["analyzer"] == "auto" and bm25["resolved_analyzer"] == expected == info["analyzer"]
    assert bm25["languages"] == {language: 1.0}
    assert info["chunk_languages"] == {language}
    assert auto >= english, (auto, english)
    # hit@1 is not asserted: measured es 83.3 (auto) vs 75.0 (english), id 75.0 vs 83.3 (the Snowball
    # Indonesian stemmer cannot restore menanam -> tanam, so a heading chunk wins one question)
    assert auto >= 90.0
