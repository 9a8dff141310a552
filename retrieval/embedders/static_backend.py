"""The static backend: a token lookup table distilled once from the model (`retrieval.embedders.static_model`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from chunkyard.retrieval.embedders.base import EmbedderConfigError, LocalEmbedder


class StaticEmbedder(LocalEmbedder):
    """Static token vectors, distilled once per machine and cached; no contextual token vectors."""

    backend = "static"
    code_version = "1"  # bump when this class changes the vectors it makes (their assets' versions follow)

    def __init__(
        self, model: str, *, batch_size: int, device: str, pca_dims: int | None, vocabulary_size: int | None
    ) -> None:
        from chunkyard.retrieval.embedders.static_model import (
            DEFAULT_PCA_DIMS,
            STATIC_MAX_TOKENS,
            StaticModelError,
            StaticSettings,
            load_static_model,
        )

        try:
            self.static_settings = StaticSettings(
                pca_dims=DEFAULT_PCA_DIMS if pca_dims is None else pca_dims, vocabulary_size=vocabulary_size
            )
        except StaticModelError as exc:
            raise EmbedderConfigError(str(exc)) from exc
        super().__init__(model, quantize=None, batch_size=batch_size, device=device)
        self._model = load_static_model(self.model_path, self.static_settings)
        self.dim = int(self._model.dim)
        self.max_seq_length = STATIC_MAX_TOKENS
        self.model_id = f"{model}@{self.static_settings.suffix}"

    def _encode(self, texts: list[str]) -> np.ndarray:
        from chunkyard.retrieval.embedders.static_model import encode_static

        return encode_static(self._model, texts, self.batch_size, self.max_seq_length)

    def _token_vectors(self, text: str) -> tuple[Any, Any, np.ndarray]:
        raise EmbedderConfigError(
            "embedder.backend: static has no contextual token vectors (late chunking and the maxsim "
            "reranker need them); use backend torch or onnx for this index"
        )

    def token_embeddings(self, texts: list[str]) -> list[np.ndarray]:
        raise EmbedderConfigError("embedder.backend: static has no contextual token vectors")
