"""Pieces held to a cap in the LLM's tokens (`max_llm_tokens`): one over it is split at sentence ends into even parts."""

from __future__ import annotations

import re

from chunkyard.chunking.sentences import sentence_spans
from chunkyard.chunking.spans import Piece, trim_span
from chunkyard.chunking.tokenizers import Tokenizer

Span = tuple[int, int]
_NOT_SPACE = re.compile(r"\S+")


def cap_pieces(text: str, pieces: list[Piece], tokenizer: Tokenizer, cap: int) -> list[Piece]:
    """`pieces` with each one over `cap` tokens of `tokenizer` split into the fewest even parts that fit:
    whole sentences where they fit, else runs between whitespace, else windows of tokens. Spans stay
    exact."""
    out: list[Piece] = []
    for piece in pieces:
        count = tokenizer.count(text[piece.start : piece.end])
        if count <= cap:
            out.append(piece)
            continue
        for start, end in _parts(text, piece.start, piece.end, count, tokenizer, cap):
            start, end = trim_span(text, start, end)
            if end > start:
                out.append(Piece(start, end, {**piece.metadata, "llm_cap": True}, piece.embed_prefix))
    return out


def _parts(text: str, start: int, end: int, count: int, tokenizer: Tokenizer, cap: int) -> list[Span]:
    """Consecutive spans covering `text[start:end]`, each within `cap` tokens, closed near `count / parts`."""
    target = count / -(-count // cap)
    units = [
        window
        for sentence in sentence_spans(text, start, end) or [(start, end)]
        for window in _within(text, sentence, tokenizer, cap)
    ]
    parts: list[Span] = []
    first, last = units[0]
    for s, e in units[1:]:
        used = tokenizer.count(text[first:last])
        if used >= target or tokenizer.count(text[first:e]) > cap:
            parts.append((first, last))
            first = s
        last = e
    parts.append((first, last))
    return parts


def _within(text: str, span: Span, tokenizer: Tokenizer, cap: int) -> list[Span]:
    """`span` itself when it fits `cap`, else its runs between whitespace (clauses in Thai, words
    elsewhere), and a run still over the cap by windows of its tokens."""
    start, end = span
    if tokenizer.count(text[start:end]) <= cap:
        return [span]
    runs = [m.span() for m in _NOT_SPACE.finditer(text, start, end)]
    if len(runs) > 1:
        return [window for run in runs for window in _within(text, run, tokenizer, cap)]
    tokens = tokenizer.spans(text[start:end])
    windows: list[Span] = []
    i = 0
    while i < len(tokens):
        j = min(i + cap, len(tokens))
        while j > i + 1 and tokenizer.count(text[start + tokens[i][0] : start + tokens[j - 1][1]]) > cap:
            j -= 1
        windows.append((start + tokens[i][0], start + tokens[j - 1][1]))
        i = j
    return windows
