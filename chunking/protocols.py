"""What the semantic/late/LLM strategies need from the outside world, as protocols."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class EmbeddingModel(Protocol):
    """Every `retrieval.embedders.embedder.Embedder` backend implements this; tests use a small fake."""

    max_seq_length: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32, L2-normalised, shape (len(texts), dim)."""
        ...

    def embed_tokens(self, text: str) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Char spans of the model's tokens in `text` and their contextual vectors (truncated at the limit)."""
        ...


@runtime_checkable
class LLMClient(Protocol):
    def complete(self, prompt: str, *, system: str | None = None) -> str: ...
