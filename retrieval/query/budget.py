"""Budget stage: results trimmed to a context budget counted in the downstream LLM's tokens.

`fit_to_budget` keeps whole results in rank order while they fit `max_context_tokens`; each result
after the first that does not fit is cut to its best run of sentences: its first highlight (the
sentences `highlights` merged for the reader, when they fit what is left), else the sentence whose
analysed query terms weigh most (their idf; 1 each without the in-memory BM25 copy), grown towards
its better-scoring neighbour while the run stays within a fair share (what is left divided by the
results left, at least `MIN_PIECE_TOKENS`; the top result, when it is cut, up to `TOP_SHARE` of the
budget); a later result that fits its share whole stays whole. A sentence longer than what is left
is split at whitespace (clauses in Thai, words elsewhere), and a piece still too long is cut to its
best window of tokens. Every trimmed result keeps an exact span of its document
(`text == document[start:end]`), and the results' token counts add up to at most the budget (each
result's count is `scores["llm_tokens"]`; a trimmed one also has `scores["trimmed"]`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from chunkyard.chunking.llm_encodings import EncodingMissingError
from chunkyard.chunking.sentences import sentence_spans
from chunkyard.chunking.tokenizers import Tokenizer, get_tokenizer
from chunkyard.retrieval.query.highlights import locate, snippet
from chunkyard.retrieval.query.highlights import sentence_spans as highlight_sentences
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.settings.option_schema import SearchError

MIN_PIECE_TOKENS = 16  # with less left than this nothing more is trimmed (a whole result may still fit)
# The top result cut to fit grows up to this share of the budget, not only budget / k: its best sentence
# alone is often a heading. Served recall within 128 tokens: Thai sample 39.1 -> 63.5, Hindi 75.0 -> 88.1,
# no set lower at 64-512 (benchmarks/results/languages.md).
TOP_SHARE = 0.5
_NOT_SPACE = re.compile(r"\S+")
Terms = Callable[[str], list[str]]
Span = tuple[int, int]


def llm_tokenizer(name: str) -> Tokenizer:
    """The tokenizer of the LLM encoding `name` (`cl100k_base` or `o200k_base`, read offline)."""
    try:
        return get_tokenizer(name)
    except EncodingMissingError as exc:
        raise SearchError(f"llm_tokenizer: {exc}") from exc


def fit_to_budget(
    results: Sequence[SearchResult],
    query: str,
    terms: Terms,
    budget: int,
    tokenizer: Tokenizer,
    weights: Mapping[str, float] | None = None,
) -> list[SearchResult]:
    """`results` (best first) within `budget` tokens in all: whole, then trimmed (see the module)."""
    wanted = set(terms(query))
    kept: list[SearchResult] = []
    left = budget
    trimming = False
    for position, result in enumerate(results):
        count = tokenizer.count(result.text)
        if count <= left and (not trimming or count <= left // (len(results) - position)):
            result.scores["llm_tokens"] = float(count)
            kept.append(result)
            left -= count
            continue
        trimming = True
        if left < MIN_PIECE_TOKENS:
            continue  # a later, shorter result may still fit whole
        share = max(left // (len(results) - position), MIN_PIECE_TOKENS)
        if position == 0:
            share = max(share, int(budget * TOP_SHARE))
        seed = _first_highlight(result)
        span = best_span(
            result.text, wanted, terms, left, tokenizer, grow_to=share, weights=weights, seed=seed
        )
        if span is None:
            continue
        trimmed = _trimmed(result, span, tokenizer)
        kept.append(trimmed)
        left -= int(trimmed.scores["llm_tokens"])
    return kept


def best_span(
    text: str,
    wanted: set[str],
    terms: Terms,
    budget: int,
    tokenizer: Tokenizer,
    grow_to: int | None = None,
    *,
    weights: Mapping[str, float] | None = None,
    seed: Span | None = None,
) -> Span | None:
    """The best-scoring run of `text`'s sentences (or clauses, or words) within `budget` tokens: the
    best sentence, then its neighbours while the run stays within `grow_to` (default `budget`).

    A sentence scores the summed `weights` (idf) of the query terms it holds (1 each without). With
    `seed` (the result's first highlight, offsets into `text`), the run starts from the sentences of
    the highlights' own split that it covers, when they fit `budget`: what the reader was shown.
    """
    limit = budget if grow_to is None else min(budget, grow_to)
    seeded = seed is not None and tokenizer.count(text[seed[0] : seed[1]]) <= budget
    pieces = _pieces(text, budget, tokenizer, highlight_sentences if seeded else sentence_spans)
    if not pieces:
        return None

    def score(piece: Span) -> float:
        held = wanted.intersection(terms(text[piece[0] : piece[1]]))
        return float(len(held)) if weights is None else sum(weights.get(t, 0.0) for t in held)

    scores = [score(piece) for piece in pieces]
    covered = [i for i, (s, e) in enumerate(pieces) if seed is not None and seed[0] <= s and e <= seed[1]]
    if seeded and covered:
        first, last = covered[0], covered[-1]
        start, end = pieces[first][0], pieces[last][1]
    else:
        first = last = max(range(len(pieces)), key=lambda i: (scores[i], -i))
        start, end = pieces[first]
    if tokenizer.count(text[start:end]) > budget:
        return _token_window(text, (start, end), wanted, terms, budget, tokenizer)
    grow = {"before": first > 0, "after": last < len(pieces) - 1}
    while grow["before"] or grow["after"]:
        before = scores[first - 1] if grow["before"] else -1
        after = scores[last + 1] if grow["after"] else -1
        side = "after" if after >= before else "before"
        i = last + 1 if side == "after" else first - 1
        s, e = (start, pieces[i][1]) if side == "after" else (pieces[i][0], end)
        if tokenizer.count(text[s:e]) <= limit:
            start, end = s, e
            first, last = min(first, i), max(last, i)
            grow[side] = first > 0 if side == "before" else last < len(pieces) - 1
        else:
            grow[side] = False
    return start, end


def _first_highlight(result: SearchResult) -> Span | None:
    """The result's first highlight as offsets into its text (None without one)."""
    if not result.highlights:
        return None
    first = result.highlights[0]
    start, end = first.start - result.start, first.end - result.start
    return (start, end) if 0 <= start < end <= len(result.text) else None


def _pieces(text: str, budget: int, tokenizer: Tokenizer, split: Callable[[str], list[Span]]) -> list[Span]:
    """`split`'s sentence spans of `text`; one longer than `budget` tokens split at whitespace."""
    pieces: list[Span] = []
    for start, end in split(text) or [(0, len(text))]:
        if tokenizer.count(text[start:end]) <= budget:
            pieces.append((start, end))
            continue
        words = [m.span() for m in _NOT_SPACE.finditer(text, start, end)]
        pieces.extend(words or [(start, end)])
    return pieces


def _token_window(
    text: str, span: Span, wanted: set[str], terms: Terms, budget: int, tokenizer: Tokenizer
) -> Span | None:
    """The window of `text[span]`, on token boundaries and within `budget` tokens, that shares the most
    terms with the query (windows overlap by half; the earliest wins a tie)."""
    start, end = span
    tokens = tokenizer.spans(text[start:end])
    size = min(budget, len(tokens))
    best: tuple[int, Span] | None = None
    starts = list(range(0, max(1, len(tokens) - size), max(1, size // 2)))
    for first in [*starts, max(0, len(tokens) - size)]:
        last = min(first + size, len(tokens)) - 1
        while last >= first:
            cut = (start + tokens[first][0], start + tokens[last][1])
            if tokenizer.count(text[cut[0] : cut[1]]) <= budget:
                break
            last -= 1
        if last < first:
            continue
        score = len(wanted.intersection(terms(text[cut[0] : cut[1]])))
        if best is None or score > best[0]:
            best = (score, cut)
    return None if best is None else best[1]


def _trimmed(result: SearchResult, span: Span, tokenizer: Tokenizer) -> SearchResult:
    """`result` cut to `span` (offsets into its text), its document span moved with it, and what the
    reader is shown with it (highlights, snippet, page or slide) kept to the cut text."""
    s, e = span
    text = result.text[s:e]
    result.scores["llm_tokens"] = float(tokenizer.count(text))
    result.scores["trimmed"] = 1.0
    result.start, result.end, result.text = result.start + s, result.start + e, text
    if not result.snippet:  # the highlights stage did not run (`highlights: false`)
        return result
    result.highlights = [h for h in result.highlights if result.start <= h.start and h.end <= result.end]
    first = result.highlights[0] if result.highlights else None
    result.snippet = snippet(text, result.start, first)
    where = (
        {"page": first.page, "slide": first.slide} if first else locate(result.metadata or {}, result.start)
    )
    result.page, result.slide = where.get("page"), where.get("slide")
    return result
