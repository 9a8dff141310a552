"""`semantic`: cut where the embedding distance between neighbouring sentences jumps."""

from __future__ import annotations

from typing import Any

import numpy as np
from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.fields import require_int
from chunkyard.chunking.sentences import pack_spans, sentence_spans
from chunkyard.chunking.spans import DocText, Piece, extend_overlap


def breakpoint_threshold(distances: np.ndarray, kind: str, amount: float) -> tuple[np.ndarray, float]:
    """Scores and the threshold above which a distance becomes a breakpoint.

    percentile: the `amount`-th percentile of distances; standard_deviation: mean +
    amount * std; interquartile: mean + amount * IQR; gradient: the `amount`-th
    percentile of the gradient of the distances (cuts where the distance jumps).
    """
    if kind == "percentile":
        return distances, float(np.percentile(distances, amount))
    if kind == "standard_deviation":
        return distances, float(np.mean(distances) + amount * np.std(distances))
    if kind == "interquartile":
        q1, q3 = np.percentile(distances, [25, 75])
        return distances, float(np.mean(distances) + amount * (q3 - q1))
    if kind == "gradient":
        scores = np.gradient(distances) if len(distances) > 1 else distances
        return scores, float(np.percentile(scores, amount))
    raise ValueError(f"threshold_type: unknown {kind!r}")


class SemanticChunker(BaseChunker):
    """Kamradt's semantic chunking: cut where neighbouring sentence windows drift apart.

    Each sentence is embedded together with `buffer` sentences on either side; the
    cosine distance between consecutive windows is compared with the threshold.
    Groups larger than `size` are re-packed by sentences; groups smaller than
    `min_size` tokens are merged into the next one.
    """

    strategy = "semantic"

    def __init__(
        self,
        *,
        embedding_model: Any,
        threshold_type: str = "percentile",
        threshold: float = 95.0,
        buffer: int = 1,
        min_size: int = 0,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.embedding_model = embedding_model
        self.threshold_type = threshold_type
        self.threshold = threshold
        self.buffer = buffer
        self.min_size = min_size

    def pieces(self, dt: DocText) -> list[Piece]:
        text = dt.text
        sentences = sentence_spans(text)
        if not sentences:
            return []
        # sentences longer than the budget are cut into token windows first
        sentences = [w for s in sentences for w in pack_spans(dt.units, [s], self.base_budget, text)]
        if len(sentences) < 3:
            groups = [(0, len(sentences))]
        else:
            b = self.buffer
            windows = [
                text[sentences[max(0, k - b)][0] : sentences[min(len(sentences) - 1, k + b)][1]]
                for k in range(len(sentences))
            ]
            vectors = np.asarray(self.embedding_model.embed(windows), dtype=np.float32)
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            distances = 1.0 - np.sum(vectors[:-1] * vectors[1:], axis=1)
            scores, limit = breakpoint_threshold(distances, self.threshold_type, self.threshold)
            cuts = [k + 1 for k in np.flatnonzero(scores > limit).tolist()]
            bounds = [0, *cuts, len(sentences)]
            groups = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        groups = self._merge_small(dt, sentences, groups)
        out: list[Piece] = []
        for gi, (a, b) in enumerate(groups):
            for s, e in pack_spans(dt.units, sentences[a:b], self.base_budget, text):
                out.append(Piece(s, e, {"semantic_group": gi}))
        return extend_overlap(out, dt.units, self.overlap, len(text), text)

    def _merge_small(self, dt: DocText, sentences, groups):
        if self.min_size <= 0 or len(groups) < 2:
            return groups
        merged: list[tuple[int, int]] = []
        for a, b in groups:
            if (
                merged
                and dt.units.estimate_one(sentences[merged[-1][0]][0], sentences[merged[-1][1] - 1][1])
                < self.min_size
            ):
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        return merged


THRESHOLD_DEFAULTS = {"percentile": 95.0, "standard_deviation": 3.0, "interquartile": 1.5, "gradient": 95.0}


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    kind = options["threshold_type"]
    if kind not in THRESHOLD_DEFAULTS:
        raise ChunkerConfigError(
            f"chunker.threshold_type: unknown {kind!r}; expected one of {', '.join(THRESHOLD_DEFAULTS)}"
        )
    threshold = options["threshold"]
    threshold = THRESHOLD_DEFAULTS[kind] if threshold is None else threshold
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ChunkerConfigError(f"chunker.threshold: expected a number, got {threshold!r}")
    if kind in ("percentile", "gradient") and not 0 <= threshold <= 100:
        raise ChunkerConfigError(f"chunker.threshold: a percentile must be in [0, 100], got {threshold}")
    buffer = require_int(options, "buffer", 1, minimum=0)
    min_size = require_int(options, "min_size", 0, minimum=0)
    return SemanticChunker(
        embedding_model=em,
        threshold_type=kind,
        threshold=float(threshold),
        buffer=buffer,
        min_size=min_size,
        **common,
    )
