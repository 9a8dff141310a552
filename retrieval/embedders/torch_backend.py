"""The torch backend: the model run by sentence-transformers, grouped by length into batches."""

from __future__ import annotations

from typing import Any

import numpy as np
from chunkyard.retrieval.embedders.base import LocalEmbedder
from chunkyard.retrieval.embedders.onnx_encoder import BATCH_TOKENS, length_groups


class TorchEmbedder(LocalEmbedder):
    """sentence-transformers on torch (CPU or `device`); `threads` sets torch's thread count."""

    backend = "torch"
    code_version = "1"  # bump when this class changes the vectors it makes (their assets' versions follow)

    def __init__(self, model: str, *, batch_size: int, device: str, threads: int | None) -> None:
        super().__init__(model, quantize=None, batch_size=batch_size, device=device)
        import torch
        from sentence_transformers import SentenceTransformer

        if threads:
            torch.set_num_threads(threads)
        self._model = SentenceTransformer(self.model_path, device=device, local_files_only=True)
        dimension = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(dimension())
        self.max_seq_length = int(self._model.max_seq_length)
        self.model_id = model

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        # under the lock, as the model: a fast tokenizer sets its truncation on every call and
        # raises "Already borrowed" when two threads call it at once (concurrent searches)
        with self._lock:
            if len(texts) == 1:  # a query: nothing to group
                groups = [np.zeros(1, dtype=np.int64)]
            else:
                encoded = self._model.tokenizer(texts, truncation=True, max_length=self.max_seq_length)
                lengths = [len(ids) for ids in encoded["input_ids"]]
                groups = length_groups(texts, lengths, self.batch_size, BATCH_TOKENS)
            for positions in groups:
                vectors[positions] = self._model.encode(
                    [texts[i] for i in positions],
                    batch_size=len(positions),
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        return vectors

    def _token_vectors(self, text: str) -> tuple[Any, Any, np.ndarray]:
        import torch

        encoded = self._model.tokenizer(
            [text],
            truncation=True,
            max_length=self.max_seq_length,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            return_tensors="pt",
        )
        offsets = encoded.pop("offset_mapping")[0].tolist()
        special = encoded.pop("special_tokens_mask")[0].tolist()
        features = {k: v.to(self.device) for k, v in encoded.items()}
        with self._lock, torch.no_grad():
            output = self._model[0](features)
        token_vectors = np.asarray(output["token_embeddings"][0].detach().cpu().numpy(), dtype=np.float32)
        return offsets, special, token_vectors

    def token_embeddings(self, texts: list[str]) -> list[np.ndarray]:
        with self._lock:
            outputs = self._model.encode(
                list(texts),
                output_value="token_embeddings",
                batch_size=self.batch_size,
                convert_to_numpy=False,
                show_progress_bar=False,
            )
        return [np.asarray(t.detach().cpu().numpy(), dtype=np.float32) for t in outputs]
