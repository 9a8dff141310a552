"""Document language detection (py3langid, offline) and the `analyzer: auto` choice per index.

Each document's language is detected once, when it is chunked, and stored in its chunks' metadata
as `text_language` (an ISO 639-1 code; `language` is the loaders' programming language of code
files). When an index with `analyzer: auto` is first built or rebuilt, its main analyzer is the one
whose languages cover most of the indexed text (code chunks do not vote), and every language with at
least MIN_LANGUAGE_SHARE of the text is analysed with its own analyzer (a mixed folder: each document
in its language; queries under all of them). Incremental updates keep the published choice, so old and
new postings are analysed alike. The choice and the language shares are published in the index
config's bm25 block (`resolved_analyzer`, `analyzers` when there are several, `languages`).
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from chunkyard.chunking.models import MODEL_LANGUAGES
from chunkyard.chunking.types import Document
from chunkyard.retrieval.lexical.analysis import (
    AUTO,
    DEFAULT_ANALYZER,
    LANGUAGES_KEY,
    RESOLVED_KEY,
    Analyzer,
    analyzer_setting,
    build_analyzer,
    shared_analyzer,
)
from chunkyard.retrieval.lexical.code_terms import code_terms

METADATA_KEY = "text_language"
# Detected language -> analyzer. Malay is written like Indonesian (and short Indonesian texts are
# often detected as Malay); CJK and every other language get `standard` (words, CJK bigrams).
LANGUAGE_ANALYZERS = {"en": "english", "es": "spanish", "id": "indonesian", "ms": "indonesian"}
LANGUAGE_ANALYZERS |= {"ru": "russian", "uk": "ukrainian", "th": "thai"}
# every other language Snowball stems (py3langid's codes; Norwegian Bokmål and Nynorsk alike)
LANGUAGE_ANALYZERS |= {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech", "da": "danish",
    "nl": "dutch", "eo": "esperanto", "et": "estonian", "fi": "finnish", "fr": "french", "de": "german",
    "el": "greek", "hi": "hindi", "hu": "hungarian", "ga": "irish", "it": "italian", "lt": "lithuanian",
    "ne": "nepali", "no": "norwegian", "nb": "norwegian", "nn": "norwegian", "fa": "persian", "pl": "polish",
    "pt": "portuguese", "ro": "romanian", "sr": "serbian", "st": "sesotho", "sv": "swedish", "ta": "tamil",
    "tr": "turkish", "yi": "yiddish",
}  # fmt: skip
# A language with less of the text is analysed with the main analyzer: a short document detected as
# another language (a heading, a code-like note) then cannot add an analyzer to every query.
MIN_LANGUAGE_SHARE = 0.01
SAMPLE_CHARS = 20_000  # detection reads the document's beginning: enough for a stable answer
_MIN_LETTERS = 3

_identifier: Any = None
_identifier_lock = threading.Lock()


def _py3langid() -> Any:
    """py3langid's identifier over all its 97 languages (the model ships in the wheel; loads in ~1 s)."""
    global _identifier
    with _identifier_lock:
        if _identifier is None:
            from chunkyard.retrieval.lexical.language_identifier import load_identifier

            _identifier = load_identifier()
    return _identifier


@dataclass(frozen=True)
class Detection:
    language: str  # ISO 639-1 code, "" when the text has (almost) no letters


def detect_language(text: str) -> Detection:
    """The language of `text` (its first SAMPLE_CHARS characters)."""
    sample = text[:SAMPLE_CHARS]
    # stop at the third letter: counting every letter of the sample cost as much as the classifier
    if next(islice((ch for ch in sample if ch.isalpha()), _MIN_LETTERS - 1, None), None) is None:
        return Detection("")
    return Detection(str(_py3langid().classify(sample)[0]))


def document_language(doc: Document) -> str:
    """A document's language: its own `text_language` metadata if a loader set one, else detected."""
    given = doc.metadata.get(METADATA_KEY)
    return str(given) if given else detect_language(doc.text).language


# A query is asked in another language than the index's text when its letters are in a script none of
# the index's languages is written in, or the detector names a language the index lacks with at least
# this probability (measured: English questions 0.78-1.0, Spanish 0.62-0.97, Indonesian 0.44-0.69).
QUERY_LANGUAGE_CONFIDENCE = 0.5
# ... or, below that confidence, when the index's languages together get less than this probability: a
# short English sentence is often English at only 0.1-0.5 ("Love is blind." 0.23), yet Vietnamese or
# Spanish at 0.0003-0.005. Tatoeba's English over Vietnamese: 44 of 1,000 under 0.5, 43 of them caught
# (served had lost 1.0 point of hit@1 to dense alone); the English sentences of its other pairs: 2,987 of
# 3,070 caught. Its sentences over an index in their own language: 31 of 66,797 would cross (romanised
# Belarusian and Khmer, Low German); the project's own questions and texts: none (the least 0.085).
QUERY_OTHER_LANGUAGES_PROBABILITY = 0.005
# A language with less of the index's text than this does not make a question in it a same-language
# one: a Spanish folder with one English note (8% of its text) answered English questions at MRR@5
# 0.611 against dense alone's 0.694; as crossing, at dense's (benchmarks/results/long_documents.md).
# Below a five-way even split, so every language of a mixed folder of five still counts.
CROSSING_MIN_SHARE = 0.15
SAME_LANGUAGE = {"ms": "id", "nb": "no", "nn": "no"}  # written alike: not another language
_SCRIPTS = {  # the script of each language not written in Latin letters (unicodedata's name prefix)
    "ru": "CYRILLIC", "uk": "CYRILLIC", "bg": "CYRILLIC", "sr": "CYRILLIC", "mk": "CYRILLIC", "be": "CYRILLIC",
    "kk": "CYRILLIC", "mn": "CYRILLIC", "ky": "CYRILLIC", "ar": "ARABIC", "fa": "ARABIC", "ur": "ARABIC",
    "ps": "ARABIC", "ug": "ARABIC", "hi": "DEVANAGARI", "mr": "DEVANAGARI", "ne": "DEVANAGARI",
    "th": "THAI", "zh": "CJK", "ja": "CJK", "ko": "HANGUL", "el": "GREEK", "he": "HEBREW", "yi": "HEBREW",
    "hy": "ARMENIAN", "ka": "GEORGIAN", "ta": "TAMIL", "bn": "BENGALI", "gu": "GUJARATI", "pa": "GURMUKHI",
    "te": "TELUGU", "kn": "KANNADA", "ml": "MALAYALAM", "si": "SINHALA", "km": "KHMER", "lo": "LAO",
    "am": "ETHIOPIC",
}  # fmt: skip
_SCRIPT_OF_NAME = {"HIRAGANA": "CJK", "KATAKANA": "CJK"}


def _query_script(text: str) -> str:
    """The script most of `text`'s letters are written in ("" without letters)."""
    counts: dict[str, int] = {}
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "").split(" ", 1)[0]
            script = _SCRIPT_OF_NAME.get(name, name)
            counts[script] = counts.get(script, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else ""


def crosses_languages(query: str, config: Mapping[str, Any]) -> bool:
    """Whether `query` is in a language the index's text is not, for an index whose model reads both.

    The index's languages are those with at least CROSSING_MIN_SHARE of its text (all detected ones
    when none has). False for a model trained on some languages only (MODEL_LANGUAGES:
    all-MiniLM-L6-v2 keeps its fusion as it was) and for an index without detected languages.
    """
    if str(config.get("embedding_model") or "") in MODEL_LANGUAGES:
        return False
    shares: dict[str, float] = {}
    for lang, share in ((config.get("bm25") or {}).get("languages") or {}).items():
        if lang:
            same = SAME_LANGUAGE.get(lang, lang)
            shares[same] = shares.get(same, 0.0) + share
    present = {lang for lang, share in shares.items() if share >= CROSSING_MIN_SHARE}
    present = present or {lang for lang, share in shares.items() if share >= MIN_LANGUAGE_SHARE}
    if not present:
        return False
    script = _query_script(query)
    if script and script not in {_SCRIPTS.get(lang, "LATIN") for lang in present}:
        return True
    probabilities: dict[str, float] = {}
    for language, probability in _py3langid().rank(query):
        same = SAME_LANGUAGE.get(language, language)
        probabilities[same] = probabilities.get(same, 0.0) + float(probability)
    language = max(probabilities, key=probabilities.__getitem__)
    if language in present:
        return False
    ours = sum(probabilities.get(lang, 0.0) for lang in present)
    return probabilities[language] >= QUERY_LANGUAGE_CONFIDENCE or ours < QUERY_OTHER_LANGUAGES_PROBABILITY


def analyzer_for_language(language: str) -> str:
    return LANGUAGE_ANALYZERS.get(language, "standard")


def choose_analyzer(text_by_language: Mapping[str, int]) -> tuple[str, dict[str, float]]:
    """The analyzer covering most text, and each language's share; English when nothing was detected."""
    total = sum(n for lang, n in text_by_language.items() if lang)
    shares = {
        lang: round(n / total, 4)
        for lang, n in sorted(text_by_language.items(), key=lambda kv: -kv[1])
        if lang
    }
    votes: dict[str, float] = {}
    for lang, share in shares.items():
        name = analyzer_for_language(lang)
        votes[name] = votes.get(name, 0.0) + share
    if not votes:
        return DEFAULT_ANALYZER, shares
    best = max(votes.values())
    winners = sorted(name for name, vote in votes.items() if vote == best)
    return (DEFAULT_ANALYZER if DEFAULT_ANALYZER in winners else winners[0]), shares


def language_analyzers(shares: Mapping[str, float]) -> dict[str, str]:
    """{language: analyzer} for each language with MIN_LANGUAGE_SHARE of the text; empty when that is one analyzer."""
    chosen = {
        lang: analyzer_for_language(lang) for lang, share in shares.items() if share >= MIN_LANGUAGE_SHARE
    }
    return chosen if len(set(chosen.values())) > 1 else {}


@dataclass(frozen=True)
class IndexAnalysis:
    """The analyzers one index build uses, and what the published config records about them."""

    analyzer: Analyzer  # the main one: documents in languages without their own analyzer, code
    setting: str  # "auto", or the explicit setting's analyzer name
    languages: dict[str, float]  # text share per detected language when `auto` chose (else empty)
    by_language: dict[str, str] = field(default_factory=dict)  # {language: analyzer} when several

    def for_language(self, language: str | None) -> Analyzer:
        """The analyzer for a document in `language` (its chunks' `text_language`)."""
        name = self.by_language.get(language or "")
        return self.analyzer if name is None else shared_analyzer(name)

    def chunk_terms(self, text: str, language: str | None, is_code: bool) -> list[str]:
        """The terms of a staged chunk's `text`: analysed in its document's `language`, a code chunk's
        (`is_code`) in the main analyzer's and never scored for a question's stop words (`code_terms`)."""
        terms = self.for_language(language).analyze(text)
        return code_terms(terms) if is_code else terms

    def as_staged(self) -> dict[str, Any]:
        staged = {"setting": self.setting, "analyzer": self.analyzer.name, "languages": self.languages}
        return {**staged, LANGUAGES_KEY: self.by_language} if self.by_language else staged


def index_analysis(
    bm25_config: Mapping[str, Any],
    published_bm25: Callable[[], Mapping[str, Any] | None],
    text_by_language: Callable[[], Mapping[str, int]],
) -> IndexAnalysis:
    """The analyzer for staging an index's terms.

    Explicit settings are used as they are. `auto` keeps the published index's choice
    (`published_bm25()`, None on a first build or a rebuild) on an incremental update (its postings
    were analysed with it) and chooses from the staged chunks' characters per language
    (`text_by_language()`) on a first build or a rebuild (then every chunk is staged).
    """
    if analyzer_setting(bm25_config) != AUTO:
        analyzer = build_analyzer(bm25_config)
        return IndexAnalysis(analyzer, analyzer.name, {})
    published = published_bm25()
    if published is not None and published.get(RESOLVED_KEY):
        return IndexAnalysis(
            shared_analyzer(str(published[RESOLVED_KEY])),
            AUTO,
            dict(published.get("languages") or {}),
            dict(published.get(LANGUAGES_KEY) or {}),
        )
    name, shares = choose_analyzer(text_by_language())
    return IndexAnalysis(shared_analyzer(name), AUTO, shares, language_analyzers(shares))


def published_config(
    config: dict[str, Any],
    staged: Mapping[str, Any] | None,
    published_bm25: Callable[[], Mapping[str, Any] | None],
) -> dict[str, Any]:
    """`config` (an IndexConfig's as_dict) with `auto` resolved as staged, else as published before
    (`published_bm25()`: the published index's `bm25` settings, None before its first publish)."""
    bm25 = dict(config.get("bm25") or {})
    if analyzer_setting(bm25) != AUTO:
        return config
    analysis = (staged or {}).get("bm25_analysis")
    if not (analysis and analysis.get("setting") == AUTO):
        before = dict(published_bm25() or {})
        analysis = {**before, "analyzer": before.get(RESOLVED_KEY) or DEFAULT_ANALYZER}
    resolved = {RESOLVED_KEY: analysis["analyzer"], "languages": analysis.get("languages") or {}}
    if analysis.get(LANGUAGES_KEY):
        resolved[LANGUAGES_KEY] = analysis[LANGUAGES_KEY]
    return {**config, "bm25": {**bm25, **resolved}}
