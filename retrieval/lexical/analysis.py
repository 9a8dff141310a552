"""Lexical analysis for BM25: text -> terms per language (stop words, stemmer, word segmentation, CJK bigrams).

Analyzers: `standard` (lowercase words only), `ukrainian`, `thai` (PyThaiNLP's dictionary word
segmentation, measured against character n-grams in benchmarks/results/languages.md), and one per
language Snowball stems (`english`, `spanish`, `german`, `turkish`, `arabic`, `hindi`, ... :
SNOWBALL_LANGUAGES).
snowballstemmer has no Ukrainian algorithm, so Ukrainian uses the light suffix stripper below
(measured against the Russian stemmer and no stemming in benchmarks/results/languages.md). Stop
words: the hand-written lists below for English, Spanish, Indonesian, Russian and Ukrainian, else
the `stopwords` package's function-word list of the language (ISC, 100-200 words), else none. `auto` (the default) is resolved per index from its documents'
languages when the index is built (`retrieval.lexical.languages`): each document is analysed in its own
language, the choice is stored in the published config (`bm25.resolved_analyzer`, the main one, and
`bm25.analyzers`, per language), and a query is analysed under every analyzer present (`MultiAnalyzer`).
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import regex

AUTO = "auto"
RESOLVED_KEY = "resolved_analyzer"  # set in the published config's bm25 block when `analyzer: auto`
LANGUAGES_KEY = "analyzers"  # with it: {language: analyzer} for the languages analysed in their own
DEFAULT_ANALYZER = "english"  # what `auto` means when nothing could be detected

# Function words only (articles, pronouns, prepositions, conjunctions, auxiliaries, question words),
# so stemming and stopping stay predictable. English is kept exactly as it was: benchmark numbers
# depend on it. The others list accented and unaccented spellings (queries are often typed without).
_STOPWORDS_TEXT = {
    "english": """a an and are as at be been but by for from had has have he her his i if in into is it its
    itself me my no not of on or our she so such than that the their theirs them then there these
    they this those to too was we were what when where which while who whom why will with would you
    your yours do does did doing am being having can could should shall may might must over under
    again further once here all any both each few more most other some own same only very just
    about above after before below between during through until up down out off against because""",
    "spanish": """a al algo algunas algunos ante antes como con contra cual cuales cuando cuanto cuanta
    cuantos cuantas de del desde donde adonde durante e el ella ellas ellos en entre era erais eran
    eras eres es esa esas ese eso esos esta estaba estaban estado estais estamos estan estar estas
    este esto estos estoy fue fueron fui fuimos ha han has hasta hay la las le les lo los mas me mi
    mis mucho muchos muy nada ni no nos nosotros o os otra otras otro otros para pero poco por porque
    que quien quienes se sea sean ser si sido sin sobre sois somos son soy su sus tambien te tenemos
    tener tengo ti tiene tienen todo todos tu tus un una uno unos vosotros y ya yo aun asi
    cuál cuáles cuándo cuánto cuánta cuántos cuántas cómo dónde adónde qué quién quiénes
    él ésta éste ése ésa aquél más sí tú mí aún así también está están estás estáis""",
    "indonesian": """ada adalah agar akan aku anda apa apakah atau bagaimana bagaimanakah bahwa belum
    berapa berapakah bila bisa bukan dalam dan dapat dari daripada dengan di dia dimana dimanakah
    ia ini itu jika juga kalau kami kamu kapan kapankah karena ke kenapa ketika kita lah maka mana
    manakah masih mengapa mereka namun nya oleh pada para pula pun saat saja sangat saya sebagai
    sebelum sedang sejak seperti sesudah setelah siapa siapakah sudah supaya tanpa telah tentang
    tersebut tetapi tapi tidak untuk yaitu yakni yang""",
    "russian": """а без бы был была были было быть в вам вас весь во вот все всё всех вы где да даже
    для до его ее её ей если есть еще ещё же за здесь зачем и из или им их к как какая какие какое
    какой когда кто куда ли либо между меня мне мы на над не него нее неё нет ни них но ну о об
    он она они оно от откуда очень по под после почему при про с сам свой себя сколько со так
    также там тем то того тоже той только том ты у уже хотя чего чей чем через что чтобы эта эти
    это этого этой этом этот я который которая которое которые которых""",
    "ukrainian": """а або адже але б без би був була були було бути в вам вас весь ви від він вона вони
    воно все всі де для до дуже є ж же з за звідки зі і із й його її їй їм їх коли котрий куди
    лише між мене мені ми на навіщо над нам нас наш не неї ним них ні ніж о по під після при про
    проте саме свій себе скільки та так також там тебе теж ти тим тих то тобі того тоді той тому
    тут у уже хто це цей ці ця цього чи чий чим чому що щоб як яка яке які який якщо яких""",
}
# snowballstemmer's algorithms, less the variants of another language (`porter`, `dutch_porter`).
SNOWBALL_LANGUAGES = [
    "arabic",
    "armenian",
    "basque",
    "catalan",
    "czech",
    "danish",
    "dutch",
    "english",
    "esperanto",
    "estonian",
    "finnish",
    "french",
    "german",
    "greek",
    "hindi",
    "hungarian",
    "indonesian",
    "irish",
    "italian",
    "lithuanian",
    "nepali",
    "norwegian",
    "persian",
    "polish",
    "portuguese",
    "romanian",
    "russian",
    "serbian",
    "sesotho",
    "spanish",
    "swedish",
    "tamil",
    "turkish",
    "yiddish",
]


def _packaged_stopwords(language: str) -> frozenset[str]:
    """The `stopwords` package's list for `language` (normalised as analysed text), empty if it has none."""
    import stopwords

    try:
        words = stopwords.get_stopwords(language)
    except stopwords.LanguageNotAvailable:
        return frozenset()
    return frozenset(unicodedata.normalize("NFKC", word).lower() for word in words if word.strip())


STOPWORDS: dict[str, frozenset[str]] = {
    language: frozenset(text.split()) for language, text in _STOPWORDS_TEXT.items()
}
STOPWORDS |= {
    language: _packaged_stopwords(language) for language in SNOWBALL_LANGUAGES if language not in STOPWORDS
}
STOPWORDS["thai"] = frozenset()  # Thai function words are segmented words too; none dropped (not measured)
# "also": missing from the packaged Hindi list, and Snowball cuts it to the one letter भ
STOPWORDS["hindi"] |= {"भी"}
ENGLISH_STOPWORDS = STOPWORDS["english"]
SPANISH_STOPWORDS = STOPWORDS["spanish"]
ANALYZERS = ("standard", *sorted(STOPWORDS))

# Ukrainian inflection endings (noun and adjective cases, verb persons, tenses and participles);
# the longest one that leaves a stem of at least three letters is removed, after a reflexive -ся/-сь.
_UKRAINIAN_SUFFIXES_TEXT = """ами ями ах ях ові еві єві ом ем єм ою ею єю ів їв ей ям ам им ім их іх ого ому ої
    ій ий ую юю ая яя ати яти іти ити ути ють ують ать ять ить іть ємо имо емо ете ите аю уєш ав ала
    али ало ив ила или ило іла іли ла ли ло ть ти ючи учи ачи ячи ння ня а я о е є і ї у ю и й ь"""
_UKRAINIAN_SUFFIXES = tuple(sorted(set(_UKRAINIAN_SUFFIXES_TEXT.split()), key=len, reverse=True))
_APOSTROPHE_IN_WORD = re.compile(r"(?<=\w)['\u2019\u02bc](?=\w)")


class UkrainianStemmer:
    """Light suffix stripping for Ukrainian (snowballstemmer has no Ukrainian algorithm)."""

    min_stem = 3

    def stemWord(self, word: str) -> str:  # noqa: N802 - snowballstemmer's method name
        if len(word) > self.min_stem + 2 and word.endswith(("ся", "сь")):
            word = word[:-2]  # reflexive; -ться is -ть + -ся: the -ть goes too (зачиняється ~ зачиняє)
            if word.endswith("ть") and len(word) > self.min_stem + 3:
                word = word[:-2]
        for suffix in _UKRAINIAN_SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= self.min_stem:
                return word[: -len(suffix)]
        return word


_THAI_CHAR = re.compile("[\u0e00-\u0e7f]")
# NFKC decomposes Thai SARA AM (U+0E33) and Lao AM (U+0EB3) into NIKHAHIT + SARA AA, which word
# segmentation then splits apart (ผู้นำ -> ผู้, นํา); analysis puts them back together.
_AM_DECOMPOSED = (("\u0e4d\u0e32", "\u0e33"), ("\u0ecd\u0eb2", "\u0eb3"))


def _recompose_am(text: str) -> str:
    """`text` with every decomposed Thai or Lao AM written as the one character again."""
    for decomposed, am in _AM_DECOMPOSED:
        if decomposed in text:
            text = text.replace(decomposed, am)
    return text


@functools.cache
def _thai_segmenter() -> Callable[[str], list[str]]:
    """PyThaiNLP's `newmm` (maximal matching over its bundled dictionary; offline, Apache-2.0)."""
    from pythainlp.tokenize import word_tokenize

    return functools.partial(word_tokenize, engine="newmm", keep_whitespace=False)


def _snowball(language: str) -> Callable[[str], str]:
    import snowballstemmer

    return snowballstemmer.stemmer(language).stemWord


def _stemmer(language: str) -> Callable[[str], str] | None:
    if language == "thai":
        return None  # Thai words do not inflect
    if language == "ukrainian":
        return UkrainianStemmer().stemWord
    return _snowball(language)


_WORD = re.compile(r"\w+", re.UNICODE)
# Python's \w leaves out combining marks, so it cuts Devanagari, Arabic (harakat), ... words at every
# vowel sign (हिमनद -> ह, मनद); `regex`'s \w keeps them, for the stemmed languages. English keeps the
# pattern its numbers were measured with; `standard` too: for scripts written without spaces (Thai)
# the cuts at vowel signs are the only word breaks it has (no segmenter yet).
_WORD_WITH_MARKS = regex.compile(r"\w+")


# The characters `_is_cjk` accepts, as one character class.
_CJK_CHAR = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\uf900-\ufaff"
    "\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af\u1100-\u11ff]"
)


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x20000 <= code <= 0x2A6DF  # extension B
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0x3040 <= code <= 0x30FF  # hiragana, katakana
        or 0x31F0 <= code <= 0x31FF  # katakana extensions
        or 0xAC00 <= code <= 0xD7AF  # hangul syllables
        or 0x1100 <= code <= 0x11FF  # hangul jamo
    )


def _cjk_bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


# A term is at most this many UTF-8 bytes: a longer "word" (a hex dump, a base64 blob) is cut to
# its first 256 bytes, for documents and queries alike, so no posting key nears Postgres' btree
# row limit (about 2.7 KB) and publishing never fails on one file's junk.
MAX_TERM_BYTES = 256


def cap_term(word: str) -> str:
    """`word` cut to at most MAX_TERM_BYTES UTF-8 bytes, on a character boundary."""
    data = word.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_TERM_BYTES:
        return word
    return data[:MAX_TERM_BYTES].decode("utf-8", "ignore")


class AnalyzerConfigError(ValueError):
    """A `bm25.analyzer` setting is invalid; the message names it."""


class Analyzer:
    """Text -> BM25 terms: lowercase unicode words; optional stopwords + stemmer; CJK bigrams.

    Words mixing CJK and other scripts are split at the script boundary; each CJK run becomes
    overlapping character bigrams (a lone CJK character stays a unigram), since CJK text has no spaces.
    Ukrainian drops apostrophes inside words (дев'ять, дев’ять and девʼять are one word).
    """

    def __init__(self, language: str | None = None, *, stopwords: bool = True, stem: bool = True) -> None:
        if language in (None, "", "standard", "none"):
            language = None
        elif language not in STOPWORDS:
            raise AnalyzerConfigError(
                f"bm25.analyzer: unknown language {language!r}; expected {AUTO!r} or one of {ANALYZERS}"
            )
        self.language = language
        self.stopwords = STOPWORDS[language] if (language and stopwords) else frozenset()
        self._stemmer = _stemmer(language) if (language and stem) else None
        self._drop_apostrophes = language == "ukrainian"
        self._segment_thai = language == "thai"
        self._word = _WORD_WITH_MARKS if language not in (None, "english") else _WORD
        self._stem = functools.lru_cache(maxsize=200_000)(self._stem_uncached)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.language or "standard"

    def _stem_uncached(self, word: str) -> str:
        return self._stemmer(word) if self._stemmer else word

    def __call__(self, text: str) -> list[str]:
        return self.analyze(text)

    def analyze(self, text: str) -> list[str]:
        terms: list[str] = []
        text = _recompose_am(unicodedata.normalize("NFKC", text).lower())
        if self._drop_apostrophes:
            text = _APOSTROPHE_IN_WORD.sub("", text)
        if _CJK_CHAR.search(text) is None:  # no CJK anywhere: every word is one word (the common case)
            for match in self._word.finditer(text):
                self._add_word(match.group(), terms)
            return terms
        for match in self._word.finditer(text):
            word = match.group()
            if not any(_is_cjk(ch) for ch in word):
                self._add_word(word, terms)
                continue
            run: list[str] = []
            cjk_run = False
            for ch in word:
                is_cjk = _is_cjk(ch)
                if run and is_cjk != cjk_run:
                    self._flush(run, cjk_run, terms)
                    run = []
                run.append(ch)
                cjk_run = is_cjk
            if run:
                self._flush(run, cjk_run, terms)
        return terms

    def _flush(self, run: list[str], cjk: bool, terms: list[str]) -> None:
        if cjk:
            terms.extend(_cjk_bigrams("".join(run)))
        else:
            self._add_word("".join(run), terms)

    def _add_word(self, word: str, terms: list[str]) -> None:
        if self._segment_thai and _THAI_CHAR.search(word):  # Thai is written without spaces
            for part in _thai_segmenter()(word):
                if not part.isspace():
                    self._add_term(part, terms)
            return
        self._add_term(word, terms)

    def _add_term(self, word: str, terms: list[str]) -> None:
        if len(word) > MAX_TERM_BYTES // 4:  # only then can it exceed MAX_TERM_BYTES in UTF-8
            word = cap_term(word)
        if word in self.stopwords:
            return
        if self._stemmer is not None:
            with self._lock:
                word = self._stem(word)
        terms.append(word)


class MultiAnalyzer:
    """Query analysis for an index whose documents were analysed in several languages.

    A query's terms are the first (main) analyzer's, then each other analyzer's terms that no
    earlier one produced, so the query matches documents of every language present. Each posting
    came from one document's own analyzer and the BM25 statistics (N, df, lengths) are over all of
    them, so scoring stays rank-bm25's; an index with one analyzer never builds one of these.
    """

    def __init__(self, analyzers: Sequence[Analyzer]) -> None:
        self.analyzers = tuple(analyzers)

    @property
    def name(self) -> str:
        return "+".join(analyzer.name for analyzer in self.analyzers)

    def __call__(self, text: str) -> list[str]:
        return self.analyze(text)

    def analyze(self, text: str) -> list[str]:
        terms = self.analyzers[0].analyze(text)
        seen = set(terms)
        for analyzer in self.analyzers[1:]:
            added = [term for term in analyzer.analyze(text) if term not in seen]
            terms.extend(added)
            seen.update(added)
        return terms


TermAnalyzer = Analyzer | MultiAnalyzer  # what analyses an index's queries


def analyzer_setting(bm25_config: Mapping[str, Any] | None) -> str | dict[str, Any]:
    """The `analyzer` a bm25 block asks for: `auto` when it names none."""
    analyzer = (bm25_config or {}).get("analyzer", AUTO)
    return AUTO if analyzer is None else analyzer


def validate_analyzer(analyzer: object) -> None:
    """Raise AnalyzerConfigError (naming `bm25.analyzer`) unless `analyzer` is auto, a name or a mapping."""
    if analyzer == AUTO:
        return
    if isinstance(analyzer, str):
        Analyzer(analyzer)
        return
    if isinstance(analyzer, dict):
        unknown = set(analyzer) - {"language", "stopwords", "stem"}
        if unknown:
            raise AnalyzerConfigError(f"bm25.analyzer: unknown field(s) {sorted(unknown)}")
        for key in ("stopwords", "stem"):
            if not isinstance(analyzer.get(key, True), bool):
                raise AnalyzerConfigError(
                    f"bm25.analyzer.{key}: must be true or false, got {analyzer[key]!r}"
                )
        Analyzer(analyzer.get("language"))
        return
    raise AnalyzerConfigError(f"bm25.analyzer: expected a name or a mapping, got {type(analyzer).__name__}")


def analyzer_name(bm25_config: Mapping[str, Any] | None) -> str:
    """The analyzer a (published) bm25 block analyses with: `auto` resolved, a mapping by its language."""
    analyzer = analyzer_setting(bm25_config)
    if analyzer == AUTO:
        return str((bm25_config or {}).get(RESOLVED_KEY) or DEFAULT_ANALYZER)
    if isinstance(analyzer, dict):
        return str(analyzer.get("language") or "standard")
    return "standard" if analyzer in ("", "none") else str(analyzer)


def analyzer_names(bm25_config: Mapping[str, Any] | None) -> list[str]:
    """Every analyzer an index's documents were analysed with, the main one first (queries use all)."""
    main = analyzer_name(bm25_config)
    per_language = (bm25_config or {}).get(LANGUAGES_KEY) if analyzer_setting(bm25_config) == AUTO else None
    names = [main]
    for name in (per_language or {}).values():
        if name not in names:
            names.append(str(name))
    return names


def build_analyzer(bm25_config: Mapping[str, Any] | None = None) -> TermAnalyzer:
    """The query analyzer of an index config's `bm25:` block (`analyzer: english`, a mapping, or auto).

    `auto` uses the choice recorded at publish (`resolved_analyzer`, and `analyzers` when the
    documents were analysed in several languages: then a MultiAnalyzer); a block that has none (a
    config that was never built) falls back to English.
    """
    analyzer = analyzer_setting(bm25_config)
    validate_analyzer(analyzer)
    if isinstance(analyzer, dict):
        return shared_analyzer(
            analyzer.get("language"),
            stopwords=bool(analyzer.get("stopwords", True)),
            stem=bool(analyzer.get("stem", True)),
        )
    names = analyzer_names(bm25_config)
    if len(names) == 1:
        return shared_analyzer(names[0])
    return MultiAnalyzer([shared_analyzer(name) for name in names])


@functools.lru_cache(maxsize=64)
def shared_analyzer(language: str | None, *, stopwords: bool = True, stem: bool = True) -> Analyzer:
    """One Analyzer per setting in a process, so every stage and search reuses its cache of stems."""
    return Analyzer(language, stopwords=stopwords, stem=stem)
