"""Budget stage: results trimmed to a context budget counted in the downstream LLM's tokens.

`fit_to_budget` keeps whole results in rank order while they fit `max_context_tokens`; each result
after the first that does not fit is cut to its best run of sentences: its first highlight (the
sentences `highlights` merged for the reader, when they fit what is left), else the sentence whose
analysed query terms weigh most (their idf; 1 each without the in-memory BM25 copy), grown towards
its better-scoring neighbour while the run stays within a fair share (what is left divided by the
results left, at least `MIN_PIECE_TOKENS`; the top result, when it is cut, up to `TOP_SHARE` of the
budget); a later result that fits its share whole stays whole. What the cuts leave unused then goes
back to the cut results, best first, a whole neighbouring sentence at a time (`_refill`: served recall
within 64 tokens, Thai sample 24.9 -> 27.8, Hindi 45.7 -> 48.5; no set lower at 64-512, languages.md).
A sentence longer than what is left
is split at whitespace (clauses in Thai, words elsewhere), and a piece still too long is cut to its
best window of tokens. Every trimmed result keeps an exact span of its document
(`text == document[start:end]`), and the results' token counts add up to at most the budget (each
result's count is `scores["llm_tokens"]`; a trimmed one also has `scores["trimmed"]`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from chunkyard.chunking.llm_tokenizer_file import tokenizer_file
from chunkyard.chunking.sentences import sentence_spans
from chunkyard.chunking.tokenizers import Tokenizer, get_tokenizer
from chunkyard.retrieval.query.highlights import locate, snippet
from chunkyard.retrieval.query.highlights import sentence_spans as highlight_sentences
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import LLM_TOKENIZERS
from chunkyard.retrieval.settings.project import llm_tokenizer_files

MIN_PIECE_TOKENS = 16  # with less left than this nothing more is trimmed (a whole result may still fit)
# The top result cut to fit grows up to this share of the budget, not only budget / k: its best sentence
# alone is often a heading. Served recall within 128 tokens: Thai sample 39.1 -> 63.5, Hindi 75.0 -> 88.1,
# no set lower at 64-512 (benchmarks/results/languages.md).
TOP_SHARE = 0.5
_NOT_SPACE = re.compile(r"\S+")
Terms = Callable[[str], list[str]]
Span = tuple[int, int]


def llm_tokenizer(name: str) -> Tokenizer:
    """The tokenizer `max_context_tokens` counts in: a built-in encoding (`cl100k_base`, `o200k_base`,
    read offline) or one of the project's `llm_tokenizers` (its LLM's own tokenizer.json)."""
    files: Mapping[str, Path] = {}
    try:
        if name in LLM_TOKENIZERS:
            return get_tokenizer(name)
        files = llm_tokenizer_files(reserved=LLM_TOKENIZERS)
        if name in files:
            return tokenizer_file(name, files[name])
    except ValueError as exc:  # an encoding not on this machine, a bad chunkyard.yaml entry or file
        raise SearchError(f"llm_tokenizer: {exc}") from exc
    raise SearchError(
        f"llm_tokenizer: unknown {name!r}; expected one of {', '.join((*LLM_TOKENIZERS, *files))} (a project "
        f"names its LLM's own tokenizer.json under llm_tokenizers in chunkyard.yaml)"
    )


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
    kept: list[int] = []
    cuts: dict[int, Span] = {}  # position -> the span of that result's text it is cut to
    left = budget
    trimming = False
    for position, result in enumerate(results):
        count = tokenizer.count(result.text)
        if count <= left and (not trimming or count <= left // (len(results) - position)):
            result.scores["llm_tokens"] = float(count)
            kept.append(position)
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
        cuts[position] = span
        kept.append(position)
        left -= tokenizer.count(result.text[span[0] : span[1]])
    _refill(results, cuts, left, wanted, terms, tokenizer, weights)
    return [_trimmed(results[p], cuts[p], tokenizer) if p in cuts else results[p] for p in kept]


def _refill(
    results: Sequence[SearchResult],
    cuts: dict[int, Span],
    left: int,
    wanted: set[str],
    terms: Terms,
    tokenizer: Tokenizer,
    weights: Mapping[str, float] | None,
) -> None:
    """Hands the tokens the first pass left unused back to the cut results, best first: each grows by
    whole sentences, its better-scoring neighbour first, within its count plus what is still left."""
    for position, (start, end) in sorted(cuts.items()):
        if left <= 0:
            return
        text = results[position].text
        used = tokenizer.count(text[start:end])
        pieces = _pieces(text, used + left, tokenizer, sentence_spans)
        scores = [_score(text, piece, wanted, terms, weights) for piece in pieces]
        grown = _grow(text, (start, end), pieces, scores, used + left, tokenizer)
        cuts[position] = grown
        left -= tokenizer.count(text[grown[0] : grown[1]]) - used


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

    scores = [_score(text, piece, wanted, terms, weights) for piece in pieces]
    covered = [i for i, (s, e) in enumerate(pieces) if seed is not None and seed[0] <= s and e <= seed[1]]
    if seeded and covered:
        first, last = covered[0], covered[-1]
        start, end = pieces[first][0], pieces[last][1]
    else:
        first = last = max(range(len(pieces)), key=lambda i: (scores[i], -i))
        start, end = pieces[first]
    if tokenizer.count(text[start:end]) > budget:
        return _token_window(text, (start, end), wanted, terms, budget, tokenizer)
    return _grow(text, (start, end), pieces, scores, limit, tokenizer)


def _score(
    text: str, piece: Span, wanted: set[str], terms: Terms, weights: Mapping[str, float] | None
) -> float:
    """The summed `weights` (idf) of the query terms `text[piece]` holds (1 each without weights)."""
    held = wanted.intersection(terms(text[piece[0] : piece[1]]))
    return float(len(held)) if weights is None else sum(weights.get(t, 0.0) for t in held)


def _grow(
    text: str, span: Span, pieces: list[Span], scores: list[float], limit: int, tokenizer: Tokenizer
) -> Span:
    """`span` widened by whole neighbouring `pieces` while it stays within `limit` tokens: the
    better-scoring side first (the later one on a tie); a side whose next piece does not fit stops."""
    start, end = span
    open_sides = {"before", "after"}
    while open_sides:
        before = [i for i, p in enumerate(pieces) if p[1] <= start][-1:] if "before" in open_sides else []
        after = [i for i, p in enumerate(pieces) if p[0] >= end][:1] if "after" in open_sides else []
        open_sides = {side for side, found in (("before", before), ("after", after)) if found}
        if not open_sides:
            break
        side = "after" if after and (not before or scores[after[0]] >= scores[before[0]]) else "before"
        s, e = (start, pieces[after[0]][1]) if side == "after" else (pieces[before[0]][0], end)
        if tokenizer.count(text[s:e]) <= limit:
            start, end = s, e
        else:
            open_sides.discard(side)
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
