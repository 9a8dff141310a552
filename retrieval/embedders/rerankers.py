"""Second-stage rerankers: a sentence-transformers CrossEncoder, or MaxSim over the embedder's tokens.

Both score (query, candidate text) pairs; the Searcher reorders its first-stage candidates by
that score and keeps it in `result.scores["rerank"]`. Nothing is downloaded: a CrossEncoder is
loaded from a local path (or a name already in the local Hugging Face cache).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from chunkyard.retrieval.embedders.embedder import Embedder


class RerankerConfigError(ValueError):
    """An unknown reranker name or a model that is not available locally."""


@runtime_checkable
class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: list[str]) -> list[float]:
        """Higher is more relevant; one score per text, in order."""
        ...


class CrossEncoderReranker:
    """sentence-transformers `CrossEncoder` from a local directory or a locally cached model name."""

    def __init__(
        self, model_name_or_path: str, *, batch_size: int = 16, max_length: int = 512, device: str = "cpu"
    ) -> None:
        from sentence_transformers import CrossEncoder

        self.name = f"cross-encoder:{model_name_or_path}"
        self.batch_size = batch_size
        model_dir = os.environ.get("CHUNKYARD_MODEL_DIR")
        path = model_name_or_path
        if not os.path.isdir(path) and model_dir and os.path.isdir(os.path.join(model_dir, path)):
            path = os.path.join(model_dir, path)
        try:
            self._model = CrossEncoder(path, device=device, max_length=max_length, local_files_only=True)
        except OSError as exc:
            raise RerankerConfigError(
                f"rerank: cross-encoder {model_name_or_path!r} is not available locally (give a directory, "
                f"a folder under CHUNKYARD_MODEL_DIR, or a model in the local Hugging Face cache): {exc}"
            ) from exc
        self._lock = threading.Lock()

    def score(self, query: str, texts: list[str]) -> list[float]:
        if not texts:
            return []
        with self._lock:
            scores = self._model.predict(
                [(query, text) for text in texts],
                batch_size=self.batch_size,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(scores, dtype=np.float64).reshape(len(texts), -1)[:, 0].tolist()


class MaxSimReranker:
    """Late interaction (ColBERT-style MaxSim) over the embedding model's contextual token vectors.

    score = sum over query tokens of the best cosine with any candidate token. Uses the embedding
    model already loaded for search, so it needs no extra download.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        if embedder is None:
            from chunkyard.retrieval.embedders.embedder import shared_embedder

            embedder = shared_embedder()
        if getattr(embedder, "backend", None) == "static":
            raise ValueError(
                "rerank: maxsim needs contextual token vectors; embedder.backend static has none"
            )
        self.embedder = embedder
        self.name = f"maxsim:{embedder.model_id}"

    def _token_vectors(self, texts: list[str]) -> list[np.ndarray]:
        vectors = []
        for array in self.embedder.token_embeddings(texts):
            vectors.append(array / np.linalg.norm(array, axis=1, keepdims=True).clip(min=1e-12))
        return vectors

    def score(self, query: str, texts: list[str]) -> list[float]:
        if not texts:
            return []
        vectors = self._token_vectors([query, *texts])
        query_tokens = vectors[0]
        return [float((query_tokens @ doc.T).max(axis=1).sum()) for doc in vectors[1:]]


def build_reranker(rerank: str | dict[str, Any], *, embedder: Embedder | None = None) -> Reranker:
    """A reranker from a name or a config's `rerank:` mapping.

    Names: `maxsim`, `cross-encoder:<local path or cached name>`. Mappings:
    `{kind: cross-encoder, model: <path>, batch_size, max_length, device}` or `{kind: maxsim}`
    (a `model` without `kind` means a cross-encoder).
    """
    if isinstance(rerank, dict):
        unknown = set(rerank) - {"kind", "model", "batch_size", "max_length", "device"}
        if unknown:
            raise RerankerConfigError(f"rerank: unknown field(s) {sorted(unknown)}")
        kind = rerank.get("kind") or ("maxsim" if rerank.get("model") == "maxsim" else "cross-encoder")
        if kind == "maxsim":
            return MaxSimReranker(embedder)
        if kind != "cross-encoder":
            raise RerankerConfigError(f"rerank.kind: unknown {kind!r}; expected 'cross-encoder' or 'maxsim'")
        if not rerank.get("model"):
            raise RerankerConfigError("rerank.model: a cross-encoder needs a model path or name")
        options = {
            key: rerank[key] for key in ("batch_size", "max_length", "device") if rerank.get(key) is not None
        }
        return CrossEncoderReranker(str(rerank["model"]), **options)
    if rerank == "maxsim":
        return MaxSimReranker(embedder)
    if isinstance(rerank, str) and rerank.startswith("cross-encoder:"):
        target = rerank.split(":", 1)[1].strip()
        if not target:
            raise RerankerConfigError("rerank: 'cross-encoder:' needs a model path or name after the colon")
        return CrossEncoderReranker(target)
    raise RerankerConfigError(
        f"rerank: unknown reranker {rerank!r}; expected 'maxsim' or 'cross-encoder:<path or name>'"
    )
