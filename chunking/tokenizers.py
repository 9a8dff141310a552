"""Injected token counting: the embedding model's tokenizer, tiktoken cl100k or o200k, characters or words.

Every tokenizer answers two questions: how many tokens a text has (`count`) and where
each token sits in the text (`spans`, character offsets), so chunkers can cut on token
boundaries and still report exact character spans.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from chunkyard.chunking.models import DEFAULT_MODEL, resolve_model_path


@dataclass(frozen=True)
class TokenUnits:
    """A document's tokenization as arrays: the unit of all chunk arithmetic.

    A unit is the smallest run of tokens that ends on a character boundary (one token
    for ASCII text; several byte tokens for one emoji in cl100k). `starts`/`ends` are
    character offsets (non-overlapping, increasing; gaps are possible, e.g. whitespace
    between words), `cum[i]` is the number of tokens in units `[0, i)`.
    """

    starts: np.ndarray
    ends: np.ndarray
    cum: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total(self) -> int:
        return int(self.cum[-1])

    def first_unit_ending_after(self, offset: int) -> int:
        return int(self.ends.searchsorted(offset, side="right"))

    def units_starting_before(self, offset: int) -> int:
        return int(self.starts.searchsorted(offset, side="left"))

    def count(self, start: int, end: int) -> int:
        """Tokens of the document tokenization that overlap `[start, end)`."""
        i = int(self.ends.searchsorted(start, side="right"))
        j = int(self.starts.searchsorted(end, side="left"))
        return int(self.cum[j] - self.cum[i]) if j > i else 0

    def estimate_one(self, start: int, end: int) -> int:
        return int(self.estimate(np.asarray([start]), np.asarray([end]))[0])

    def counts(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Vectorised `count` for many spans."""
        i = self.ends.searchsorted(starts, side="right")
        j = self.starts.searchsorted(ends, side="left")
        return np.maximum(self.cum[j] - self.cum[np.minimum(i, j)], 0)

    def estimate(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Token counts of spans as if each span were tokenized on its own.

        Like `counts`, plus one token for each edge that cuts a unit (re-tokenizing the
        remainder of a cut token, e.g. "schlumberger" without its leading space, costs
        one more token than the document's " schl").
        """
        n = len(self.starts)
        i = self.ends.searchsorted(starts, side="right")
        j = self.starts.searchsorted(ends, side="left")
        base = np.maximum(self.cum[j] - self.cum[np.minimum(i, j)], 0)
        if n == 0:
            return base
        has = j > i
        partial_start = has & (self.starts[np.minimum(i, n - 1)] < starts)
        partial_end = has & (self.ends[np.maximum(j - 1, 0)] > ends)
        return base + partial_start + partial_end

    @classmethod
    def from_spans(cls, spans: list[tuple[int, int]], weights: np.ndarray | None = None) -> TokenUnits:
        if not spans:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, np.zeros(1, dtype=np.int64))
        arr = np.asarray(spans, dtype=np.int64)
        w = np.ones(len(arr), dtype=np.int64) if weights is None else weights
        cum = np.zeros(len(arr) + 1, dtype=np.int64)
        np.cumsum(w, out=cum[1:])
        return cls(arr[:, 0].copy(), arr[:, 1].copy(), cum)


def _units_from_token_ends(char_ends: np.ndarray, weights: np.ndarray | None = None) -> TokenUnits:
    """Group tokens whose (snapped) end does not advance into the preceding unit.

    `weights` (default 1 per token) is what each token counts (`ModelTokenizer`'s unknown tokens).
    """
    n = len(char_ends)
    if n == 0:
        return TokenUnits.from_spans([])
    prev = np.empty(n, dtype=np.int64)
    prev[0] = 0
    prev[1:] = char_ends[:-1]
    keep = char_ends > prev
    counted = np.zeros(n + 1, dtype=np.int64)  # tokens (weighted) before token i
    if weights is None:
        counted = np.arange(n + 1, dtype=np.int64)
    else:
        np.cumsum(weights, out=counted[1:])
    if keep.all():
        return TokenUnits(prev, char_ends, counted)
    idx = np.flatnonzero(keep)
    ends = char_ends[idx]
    starts = prev[idx]
    # a kept token absorbs the following tokens that did not advance the char offset
    cum = np.zeros(len(idx) + 1, dtype=np.int64)
    cum[1:] = counted[np.append(idx[1:], n)]  # the first unit also absorbs any leading empty tokens
    return TokenUnits(starts, ends, cum)


def token_units(tokenizer: Tokenizer, text: str) -> TokenUnits:
    """Tokenize once; fast path when the tokenizer provides `units`."""
    units = getattr(tokenizer, "units", None)
    if units is not None:
        return units(text)
    return TokenUnits.from_spans(tokenizer.spans(text))


def special_token_overhead(tokenizer: Tokenizer) -> int:
    """Tokens a model adds to every input ([CLS], [SEP]); 0 for plain tokenizers."""
    return int(getattr(tokenizer, "special_tokens", 0))


class Tokenizer(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character span of every token, in order, non-overlapping."""
        ...


class CharTokenizer:
    name = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [(i, i + 1) for i in range(len(text))]

    def units(self, text: str) -> TokenUnits:
        n = len(text)
        return TokenUnits(
            np.arange(n, dtype=np.int64),
            np.arange(1, n + 1, dtype=np.int64),
            np.arange(n + 1, dtype=np.int64),
        )


_WORD = re.compile(r"\S+")
# where a WordPiece encoding may be split without changing tokens: whitespace, and CJK
# ideographs (BERT's normaliser surrounds each with spaces)
_SEGMENT_BREAK = re.compile(r"[\s\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")


class WordTokenizer:
    """Whitespace-separated words."""

    name = "words"

    def count(self, text: str) -> int:
        return sum(1 for _ in _WORD.finditer(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(text)]

    def units(self, text: str) -> TokenUnits:
        return TokenUnits.from_spans(self.spans(text))


class TiktokenTokenizer:
    """An OpenAI encoding read offline (`chunking.llm_encodings`): `cl100k` (default) or `o200k`."""

    def __init__(self, encoding: str = "cl100k") -> None:
        from chunkyard.chunking.llm_encodings import ENCODINGS, load

        self.name = ENCODINGS[encoding].short
        self._enc = load(encoding)
        self._char_starts: np.ndarray | None = None

    def _token_char_starts(self) -> np.ndarray:
        """For every token id, how many UTF-8 characters start inside its bytes.

        The cumulative sum over a document's tokens is then the character offset where
        each token ends (a token ending inside a multi-byte character counts that
        character as started, i.e. its end snaps forward to the character's end).
        Built once; no decoding per document. One byte per entry where every token fits
        (cl100k's longest is 128 bytes, o200k's as well): the per-document gather reads 8x less memory.
        """
        if self._char_starts is None:
            table = np.zeros(self._enc.n_vocab, dtype=np.int64)
            for token_bytes, rank in self._enc._mergeable_ranks.items():
                table[rank] = sum(1 for b in token_bytes if b & 0xC0 != 0x80)
            self._char_starts = table.astype(np.uint8) if table.max() <= 255 else table
        return self._char_starts

    def encode_array(self, text: str) -> np.ndarray:
        """Token ids as a numpy array; special-token text is encoded as ordinary text."""
        try:
            return self._enc.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
        except UnicodeEncodeError:  # lone surrogates: tiktoken's own fallback, one char -> U+FFFD
            return np.asarray(self._enc.encode_ordinary(text), dtype=np.uint32)

    def units(self, text: str) -> TokenUnits:
        ids = self.encode_array(text)
        if len(ids) == 0:
            return TokenUnits.from_spans([])
        chars_started = self._token_char_starts()[ids]
        if chars_started.min() > 0:  # every token ends on a new character: units are tokens
            bounds = np.zeros(len(ids) + 1, dtype=np.int64)
            np.cumsum(chars_started, dtype=np.int64, out=bounds[1:])
            return TokenUnits(bounds[:-1], bounds[1:], np.arange(len(ids) + 1, dtype=np.int64))
        return _units_from_token_ends(np.cumsum(chars_started, dtype=np.int64))

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        ids = self._enc.encode_ordinary(text)
        if not ids:
            return []
        byte_lengths = np.fromiter((len(b) for b in self._enc.decode_tokens_bytes(ids)), dtype=np.int64)
        byte_ends = np.cumsum(byte_lengths)
        if text.isascii():
            char_ends = byte_ends
        else:
            # byte offset -> char offset; a token ending inside a multi-byte char is snapped
            # forward to the end of that char so every span is a valid string slice.
            encoded = text.encode("utf-8", "surrogatepass")
            is_char_start = (np.frombuffer(encoded, dtype=np.uint8) & 0xC0) != 0x80
            char_index_of_byte = np.cumsum(is_char_start)  # chars started up to and incl. byte i
            char_ends = char_index_of_byte[byte_ends - 1]
            char_ends = np.maximum.accumulate(char_ends)
        char_ends = char_ends.tolist()
        starts = [0, *char_ends[:-1]]
        return [(s, e) for s, e in zip(starts, char_ends, strict=True) if e > s]


# A script the model's vocabulary lacks becomes unknown tokens, one per word ([UNK] for a whole Thai
# run between spaces under all-MiniLM-L6-v2): such a token counts one per UNKNOWN_LETTERS letters
# (and combining marks) it covers instead, a script-neutral unit, so a chunk holds about as much text
# as in a script the model reads (English: ~4 letters a token) and no unknown run makes it longer.
UNKNOWN_LETTERS = 4


def _letters(text: str) -> int:
    return sum(1 for ch in text if ch.isalpha() or unicodedata.category(ch) in ("Mn", "Mc"))


class ModelTokenizer:
    """The embedding model's own tokenizer (HF `tokenizers`).

    `count` includes the special tokens the model adds ([CLS], [SEP]), so a chunk of
    `size == max_seq_length` is exactly what the model sees: nothing silently truncated. An
    unknown token counts as its letters / UNKNOWN_LETTERS (at least one): the model reads nothing of
    that text, and the count must not let it fill a chunk with it.
    """

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        path = resolve_model_path(model)
        self.name = f"model:{model}"
        self._tok = HFTokenizer.from_file(f"{path}/tokenizer.json")
        self._tok.no_truncation()
        self._tok.no_padding()
        self.special_tokens = len(self._tok.encode("", add_special_tokens=True).ids)
        unknown = [self._tok.token_to_id(token) for token in ("[UNK]", "<unk>")]
        self.unknown_id = next((i for i in unknown if i is not None), None)

    def _unknown_extra(self, text: str, ids: list[int], offsets: list[tuple[int, int]]) -> np.ndarray | None:
        """Per token, what it counts beyond one (unknown tokens only); None when there is none."""
        if self.unknown_id is None or self.unknown_id not in ids:
            return None
        extra = np.zeros(len(ids), dtype=np.int64)
        for i, token in enumerate(ids):
            if token == self.unknown_id:
                start, end = offsets[i]
                extra[i] = max(1, -(-_letters(text[start:end]) // UNKNOWN_LETTERS)) - 1
        return extra

    def _counted(self, text: str, encoding: object) -> int:
        extra = self._unknown_extra(text, encoding.ids, encoding.offsets)  # type: ignore[attr-defined]
        n = len(encoding.ids) + self.special_tokens  # type: ignore[attr-defined]
        return n if extra is None else n + int(extra.sum())

    def count(self, text: str) -> int:
        return self._counted(text, self._tok.encode(text, add_special_tokens=False))

    def count_batch(self, texts: list[str]) -> list[int]:
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        return [self._counted(text, e) for text, e in zip(texts, encs, strict=True)]

    # HF tokenizers slow down on very long strings; WordPiece never joins across
    # whitespace or CJK ideographs, so encoding segments cut there gives the same tokens.
    SEGMENT_CHARS = 2000

    def units(self, text: str) -> TokenUnits:
        bounds = [0]
        while bounds[-1] + self.SEGMENT_CHARS < len(text):
            m = _SEGMENT_BREAK.search(text, bounds[-1] + self.SEGMENT_CHARS)
            if m is None:
                break
            bounds.append(m.start())
        bounds.append(len(text))
        segments = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        encodings = self._tok.encode_batch(segments, add_special_tokens=False)
        arrays = [
            np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2) + a
            for enc, a in zip(encodings, bounds, strict=False)
            if len(enc.offsets)
        ]
        if not arrays:
            return TokenUnits.from_spans([])
        arr = np.concatenate(arrays)
        ends = np.maximum.accumulate(arr[:, 1])
        extras = [
            self._unknown_extra(seg, enc.ids, enc.offsets)
            for seg, enc in zip(segments, encodings, strict=True)
        ]
        if all(extra is None for extra in extras):
            return _units_from_token_ends(ends)
        weights = 1 + np.concatenate(
            [
                np.zeros(len(enc.ids), dtype=np.int64) if x is None else x
                for enc, x in zip(encodings, extras, strict=True)
            ]
        )
        return _units_from_token_ends(ends, weights)

    def spans(self, text: str) -> list[tuple[int, int]]:
        offsets = self._tok.encode(text, add_special_tokens=False).offsets
        spans: list[tuple[int, int]] = []
        last_end = 0
        for s, e in offsets:
            s = max(s, last_end)  # sub-word pieces of one char may repeat an offset
            if e > s:
                spans.append((s, e))
                last_end = e
        return spans


@functools.lru_cache(maxsize=16)
def get_tokenizer(name: str = "model", model: str = DEFAULT_MODEL) -> Tokenizer:
    """`model` (the embedding model's tokenizer), `cl100k`, `o200k`, `chars` or `words`."""
    if name == "model":
        return ModelTokenizer(model)
    if name in ("cl100k", "cl100k_base", "tiktoken"):
        return TiktokenTokenizer()
    if name in ("o200k", "o200k_base"):
        return TiktokenTokenizer(name)
    if name in ("chars", "characters"):
        return CharTokenizer()
    if name == "words":
        return WordTokenizer()
    raise ValueError(f"tokenizer: unknown {name!r}; expected one of model, cl100k, o200k, chars, words")
