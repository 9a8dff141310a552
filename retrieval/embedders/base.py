"""What every local embedding backend shares: the model's prompt per role, the tokenizer, token spans."""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
from chunkyard.chunking.models import resolve_model_path

# What a text is to the model: models such as e5 prefix each with its own prompt ("query: ", "passage: ").
ROLES = ("document", "query")


class EmbedderConfigError(ValueError):
    """An embedder option is invalid; the message names the option."""


def model_prompts(model_path: str) -> dict[str, str]:
    """The model's own prefix per role, from its `config_sentence_transformers.json` prompts (the
    document prompt is named `document`, `passage` or `corpus` there, as sentence-transformers reads it);
    "" where it has none."""
    file = Path(model_path) / "config_sentence_transformers.json"
    prompts = (json.loads(file.read_text(encoding="utf-8")).get("prompts") or {}) if file.is_file() else {}
    document = next((prompts[name] for name in ("document", "passage", "corpus") if prompts.get(name)), "")
    return {"document": document, "query": prompts.get("query") or ""}


class LocalEmbedder(ABC):
    """A local embedding model: `embed` (normalised float32 sentence vectors) and `embed_tokens`.

    `model_id` is the embedding cache key: it names the model, backend and quantisation, since
    vectors from different backends/quantisations are not interchangeable bit for bit. Texts get the
    model's own prefix for their role (`model_prompts`): documents by default, queries when asked.
    Each backend sets `dim`, `max_seq_length` and `model_id` and encodes prefixed texts (`_encode`).
    """

    backend: str
    code_version: str  # declared by each backend class: bump it when the class changes its vectors
    dim: int
    max_seq_length: int
    model_id: str

    def __init__(self, model: str, *, quantize: str | None, batch_size: int, device: str) -> None:
        self.model_name = model
        self.quantize = quantize
        self.batch_size = batch_size
        self.device = device
        self.model_path = resolve_model_path(model)
        self.prompts = model_prompts(self.model_path)
        self._lock = threading.Lock()
        self._tokenizer = None

    @property
    def tokenizer(self):
        """The model's tokenizer as a `chunking.tokenizers.ModelTokenizer` (counts incl. specials)."""
        if self._tokenizer is None:
            from chunkyard.chunking.tokenizers import get_tokenizer

            self._tokenizer = get_tokenizer("model", self.model_name)
        return self._tokenizer

    def embed(self, texts: list[str], role: str = "document") -> np.ndarray:
        """L2-normalised float32 vectors, shape (len(texts), dim), of documents or (`role="query"`) queries."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings, not a single string")
        if role not in ROLES:
            raise ValueError(f"embed(): role must be one of {ROLES}, got {role!r}")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        prefix = self.prompts[role]
        texts = [prefix + text for text in texts] if prefix else list(texts)
        return self._encode(texts)

    @abstractmethod
    def _encode(self, texts: list[str]) -> np.ndarray:
        """The vectors of texts already prefixed with their role's prompt."""

    def embed_tokens(self, text: str) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Char spans of the model's tokens in `text` and their contextual vectors (special tokens dropped).

        Text longer than the model limit is truncated: only the first `max_seq_length` tokens
        (including [CLS]/[SEP]) are seen, so spans cover a prefix of `text`. The model's document
        prompt is read with the text, and its tokens are dropped like the special ones.
        """
        prefix = self.prompts["document"]
        offsets, special, token_vectors = self._token_vectors(prefix + text)
        spans: list[tuple[int, int]] = []
        keep: list[int] = []
        for i, ((start, end), is_special) in enumerate(zip(offsets, special, strict=True)):
            if is_special or end <= max(start, len(prefix)):
                continue
            spans.append((max(int(start), len(prefix)) - len(prefix), int(end) - len(prefix)))
            keep.append(i)
        return spans, token_vectors[keep]

    @abstractmethod
    def _token_vectors(self, text: str) -> tuple[Any, Any, np.ndarray]:
        """(char offsets, special-token mask, contextual vectors) of one prefixed text's tokens."""

    @abstractmethod
    def token_embeddings(self, texts: list[str]) -> list[np.ndarray]:
        """Each text's contextual token vectors ([CLS] and [SEP] included, padding dropped), batched
        as `embed` batches; for late interaction (the maxsim reranker)."""

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, dim={self.dim}, max_seq_length={self.max_seq_length})"
