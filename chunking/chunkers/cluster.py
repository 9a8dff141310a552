"""`cluster`: group pieces into chunks by the segmentation that maximises within-chunk similarity."""

from __future__ import annotations

from typing import Any

import numpy as np
from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.chunkers.recursive import RECURSIVE_PRESETS, RecursiveChunker
from chunkyard.chunking.fields import require_int
from chunkyard.chunking.spans import DocText, Piece, extend_overlap


class ClusterChunker(BaseChunker):
    """Chroma's ClusterSemanticChunker, with exact spans and a hard token limit.

    The document is first split recursively into pieces of about `piece_size` tokens
    (Chroma's separators). Pieces are embedded; the pairwise cosine similarity matrix,
    shifted by its mean off-diagonal value, scores a chunk as the sum of its sub-matrix.
    Dynamic programming picks the segmentation with the largest total score, with at
    most `size // piece_size` pieces and at most `size` tokens per chunk. Differences from
    Chroma's code: chunks are document spans (Chroma joins pieces with spaces), the token
    limit is enforced, and a position no segment improves is not defaulted to a segment
    starting at the first piece.
    """

    strategy = "cluster"

    def __init__(self, *, embedding_model: Any, piece_size: int = 50, **kw: Any) -> None:
        super().__init__(**kw)
        self.embedding_model = embedding_model
        self.piece_size = piece_size
        common = {
            "tokenizer": self.tokenizer,
            "size": piece_size,
            "overlap": 0,
            "config_key": self.config_key,
        }
        self._splitter = RecursiveChunker(**RECURSIVE_PRESETS["chroma"], preset="chroma", **common)

    def pieces(self, dt: DocText) -> list[Piece]:
        text = dt.text
        spans = self._splitter.split_span(dt, 0, len(text), self._splitter.budget)
        if not spans:
            return []
        if len(spans) == 1:
            return [Piece(spans[0][0], spans[0][1], {"pieces": 1})]
        vectors = np.asarray(self.embedding_model.embed([text[s:e] for s, e in spans]), dtype=np.float32)
        max_pieces = max(1, self.size // self.piece_size)
        band = banded_similarity(vectors, max_pieces)
        arr = np.asarray(spans, dtype=np.int64)
        segments = optimal_segmentation(band, max_pieces, dt.units, arr[:, 0], arr[:, 1], self.base_budget)
        out = [Piece(int(arr[a, 0]), int(arr[b - 1, 1]), {"pieces": b - a}) for a, b in segments]
        return extend_overlap(out, dt.units, self.overlap, len(text), text)


def banded_similarity(vectors: np.ndarray, max_pieces: int) -> np.ndarray:
    """`band[i, d]` = cosine(piece i, piece i + d) minus the mean over all pairs, for d < max_pieces.

    Only pairs that can share a chunk are computed (memory O(n * max_pieces)); the mean
    over all n(n-1)/2 pairs comes from |sum v|^2 without the full matrix.
    """
    v = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    n = len(v)
    total = v.sum(axis=0, dtype=np.float64)
    pair_sum = (float(total @ total) - float(np.sum(v.astype(np.float64) ** 2))) / 2
    mean = pair_sum / (n * (n - 1) / 2) if n > 1 else 0.0
    band = np.zeros((n, max(1, max_pieces)), dtype=np.float64)
    for d in range(1, max_pieces):
        if d < n:
            band[: n - d, d] = np.sum(v[: n - d] * v[d:], axis=1) - mean
    return band


def optimal_segmentation(
    band: np.ndarray, max_pieces: int, units, starts: np.ndarray, ends: np.ndarray, budget: int
) -> list[tuple[int, int]]:
    """Segments `[a, b)` maximising the summed within-segment similarity.

    A segment's score is the sum of its similarity sub-matrix (diagonal zero), i.e. twice
    the sum of `band` over its pairs. A segment may hold at most `max_pieces` pieces and
    must fit the token budget; a single piece always fits. O(n * max_pieces^2).
    """
    n = band.shape[0]
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    choice = np.zeros(n + 1, dtype=np.int64)
    block = np.zeros(max_pieces + 1)  # block[k] = score of the segment of the last k pieces ending at b
    for b in range(1, n + 1):
        m = min(max_pieces, b)
        # pairs (i, b-1) for i in [b-m, b-2]: their sums, accumulated from the nearest i outwards
        new_block = np.zeros(m + 1)
        added = 0.0
        for k in range(2, m + 1):
            i = b - k
            added += 2.0 * band[i, b - 1 - i]
            new_block[k] = block[k - 1] + added
        block = new_block
        a_range = np.arange(b - m, b)
        sizes = b - a_range
        fits = units.estimate(starts[a_range], np.full(m, ends[b - 1])) <= budget
        fits[-1] = True
        total = np.where(fits, best[a_range] + block[sizes], -np.inf)
        k = m - 1 - int(np.argmax(total[::-1]))  # on ties the shortest segment wins, as in Chroma's loop
        best[b] = total[k]
        choice[b] = a_range[k]
    segments: list[tuple[int, int]] = []
    b = n
    while b > 0:
        a = int(choice[b])
        segments.append((a, b))
        b = a
    segments.reverse()
    return segments


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    piece_size = require_int(options, "piece_size", 50, minimum=4)
    if piece_size > common["size"]:
        raise ChunkerConfigError(f"chunker.piece_size: {piece_size} must not exceed size {common['size']}")
    return ClusterChunker(embedding_model=em, piece_size=piece_size, **common)
