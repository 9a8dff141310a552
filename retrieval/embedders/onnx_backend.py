"""The ONNX backend: the model exported once per machine (fp32 and int8), run with onnxruntime alone.

torch and sentence-transformers are imported only to make the export, in child processes
(`retrieval.embedders.onnx_export`); `retrieval.embedders.onnx_encoder` runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from chunkyard.chunking.model_cache import build_once, folder_digest, model_cache_dir
from chunkyard.retrieval.embedders.base import LocalEmbedder
from chunkyard.retrieval.embedders.onnx_encoder import OnnxEncoder
from chunkyard.retrieval.embedders.onnx_export import ONNX_FP32_FILE, export_in_children

QUANTIZATIONS = (None, "int8")


def onnx_cache_dir(model_path: str, name: str | None = None) -> Path:
    """Where the ONNX export (fp32 and int8) of a local model lives: the per-machine model cache, in a
    folder named after the model (`name`, else its folder) and the digest of its files."""
    return model_cache_dir() / "onnx" / f"{Path(name or model_path).name}-{folder_digest(model_path)}"


class OnnxEmbedder(LocalEmbedder):
    """The model's ONNX export (`quantize: int8` for the quantised file); `threads` for onnxruntime."""

    backend = "onnx"
    code_version = "1"  # bump when this class changes the vectors it makes (their assets' versions follow)

    def __init__(
        self, model: str, *, quantize: str | None, batch_size: int, device: str, threads: int | None
    ) -> None:
        super().__init__(model, quantize=quantize, batch_size=batch_size, device=device)
        self._threads = threads
        self._model = self._load_onnx()
        self.dim = self._model.dim
        self.max_seq_length = int(self._model.max_seq_length)
        self.model_id = f"{model}@onnx" + (f"-{quantize}" if quantize else "")

    def _load_onnx(self) -> OnnxEncoder:
        """The model's ONNX export from the per-machine model cache, exported (or repaired) first:
        once per machine and model (`chunking.model_cache.build_once`), both files verified."""
        return build_once(
            onnx_cache_dir(self.model_path, self.model_name),
            self._export_onnx,
            lambda folder: self._open_onnx(folder, self.quantize),
            f"the ONNX export of {self.model_name}",
        )

    def _open_onnx(self, export_dir: Path, quantize: str | None = None) -> OnnxEncoder:
        """The export's fp32 (or int8) model, checked by embedding a probe sentence."""
        file_name = ONNX_FP32_FILE
        if quantize:
            quantized = sorted((export_dir / "onnx").glob("model_*int8_avx2.onnx"))
            if not quantized:
                raise FileNotFoundError(f"{export_dir}: no int8 model file")
            file_name = f"onnx/{quantized[0].name}"
        model = OnnxEncoder(export_dir, file_name, self._threads)
        vector = model.encode(["probe"], 1)
        if vector.ndim != 2 or not np.isfinite(vector).all():
            raise ValueError(f"{export_dir / file_name}: the probe embedding is not finite")
        return model

    def _export_onnx(self, staging: Path) -> None:
        """fp32 and int8 ONNX files into `staging`, each made in a child process (torch and the
        quantiser, once per machine: `retrieval.embedders.onnx_export`), then both opened here."""
        export_in_children(self.model_path, staging, self.device)
        for quantize in QUANTIZATIONS:  # raises if either file is unusable
            self._open_onnx(staging, quantize)

    @property
    def export_dir(self) -> Path:
        """The folder of the export in the per-machine model cache."""
        return self._model.export_dir

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, self.batch_size)

    def _token_vectors(self, text: str) -> tuple[Any, Any, np.ndarray]:
        ((encoding, token_vectors),) = self._model.token_embeddings([text], 1)
        return encoding.offsets, encoding.special_tokens_mask, token_vectors

    def token_embeddings(self, texts: list[str]) -> list[np.ndarray]:
        return [vectors for _, vectors in self._model.token_embeddings(list(texts), self.batch_size)]
