"""A tiny deterministic stand-in for the embedding model, for fast property tests.

Vectors are bag-of-words hashes (so texts sharing words are similar); token vectors of
`embed_tokens` are the same per whitespace word, truncated at `max_seq_length`, just
like a real model truncates.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

DIM = 32
_WORD = re.compile(r"\S+")


class FakeEmbeddingModel:
    def __init__(self, max_seq_length: int = 128) -> None:
        self.max_seq_length = max_seq_length
        self.dim = DIM

    @staticmethod
    def _vector(text: str) -> np.ndarray:
        v = np.zeros(DIM, dtype=np.float32)
        for w in _WORD.findall(text.lower()):
            v[zlib.crc32(w.strip(".,!?").encode("utf-8", "surrogatepass")) % DIM] += 1.0
        v[0] += 0.05
        return v / np.linalg.norm(v)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        return np.stack([self._vector(t) for t in texts])

    def embed_tokens(self, text: str) -> tuple[list[tuple[int, int]], np.ndarray]:
        spans = [m.span() for m in _WORD.finditer(text)][: self.max_seq_length - 2]
        if not spans:
            return [], np.zeros((0, DIM), dtype=np.float32)
        return spans, np.stack([self._vector(text[s:e]) for s, e in spans])
