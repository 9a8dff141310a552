"""Sentence and token vectors from an exported ONNX model with onnxruntime and tokenizers alone (no torch).

It batches, pads and pools as sentence-transformers' ONNX backend does (texts sorted by character
length, longest first, padded to the longest in each batch), so vectors agree with it to float32
rounding. That matters for the int8 model: dynamic quantisation scales each batch's activations by
that batch's range, so a text's vector depends on the texts batched with it. Loading takes a fraction
of a second where importing torch and sentence-transformers takes several, which is most of a small
Dagster run's start-up (benchmarks/results/freshness.md).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np

POOLING_MODES = ("mean", "cls", "max")
# At most this many padded tokens per model call: 8 texts of 256 word pieces. A call's activations
# (the feed-forward layer's are tokens x 1536 floats) then stay in the CPU's cache. Side by side on
# this machine's 2 cores, 256-token chunks embedded 34 % faster on torch and 12 % on ONNX int8 than in
# calls of 32; 64-token chunks, which still go 32 at a time, the same; the 1,000-document benchmark
# collection's chunks (mean 152 tokens) 2-4 % faster.
BATCH_TOKENS = 2048


def length_groups(
    texts: list[str], lengths: list[int], batch_size: int, batch_tokens: int
) -> list[np.ndarray]:
    """Positions of `texts` in sentence-transformers' order (longest by characters first), cut into
    groups of at most `batch_size` texts whose padded size (texts x the group's longest, in tokens,
    from `lengths`) stays within `batch_tokens`; a text longer than the budget gets a group alone.

    With `batch_size` x the longest text within the budget, the groups are sentence-transformers'
    own batches, so vectors match its batch for batch (the int8 model's depend on their batch).
    """
    order = np.argsort([-len(t) for t in texts])
    groups: list[np.ndarray] = []
    start, widest = 0, 0
    for end, position in enumerate(order):
        widest_with = max(widest, lengths[position])
        if end > start and (end - start >= batch_size or (end - start + 1) * widest_with > batch_tokens):
            groups.append(order[start:end])
            start, widest_with = end, lengths[position]
        widest = widest_with
    if len(order):
        groups.append(order[start:])
    return groups


class OnnxEncoderError(ValueError):
    """An export this encoder cannot run; the message names the file and field at fault."""


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _pooling_mode(export_dir: Path) -> str:
    """The Pooling module's mode from the export's `modules.json` (mean when there is none)."""
    modules = json.loads((export_dir / "modules.json").read_text(encoding="utf-8"))
    pooling = [m for m in modules if m.get("type", "").endswith(".Pooling")]
    if not pooling:
        return "mean"
    pooling_file = _read_json(export_dir / pooling[0]["path"] / "config.json")  # the model's own file
    mode = pooling_file.get("pooling_mode") or next(
        (m for m in POOLING_MODES if pooling_file.get(f"pooling_mode_{m}_tokens")), None
    )
    if mode == "mean" and pooling_file.get("pooling_mode_mean_sqrt_len_tokens"):
        mode = None
    if mode not in POOLING_MODES:
        raise OnnxEncoderError(
            f"{export_dir / pooling[0]['path'] / 'config.json'}: pooling_mode {mode!r} is not one of "
            f"{POOLING_MODES}"
        )
    return mode


def _max_seq_length(export_dir: Path) -> int:
    """sentence-transformers' rule: sentence_bert_config's max_seq_length, else the tokenizer's
    model_max_length, capped by the model's max_position_embeddings."""
    bert = _read_json(export_dir / "sentence_bert_config.json")
    length = bert.get("max_seq_length") or _read_json(export_dir / "tokenizer_config.json").get(
        "model_max_length"
    )
    positions = _read_json(export_dir / "config.json").get("max_position_embeddings")
    if not isinstance(length, int) or length > 100_000:
        length = positions
    if not isinstance(length, int) or length < 2:
        raise OnnxEncoderError(
            f"{export_dir}: no max_seq_length, model_max_length or max_position_embeddings"
        )
    return min(length, positions) if isinstance(positions, int) else length


class OnnxEncoder:
    """One ONNX model file of a sentence-transformers export, run by onnxruntime on the CPU."""

    def __init__(self, export_dir: Path, file_name: str, threads: int | None = None) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.export_dir = Path(export_dir)
        self.max_seq_length = _max_seq_length(self.export_dir)
        self.pooling = _pooling_mode(self.export_dir)
        self.tokenizer = Tokenizer.from_file(str(self.export_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(
            str(self.export_dir / file_name), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self.session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise OnnxEncoderError(f"{self.export_dir / file_name}: no model input(s) {sorted(missing)}")
        self._output = self.session.get_outputs()[0].name
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self._lock = threading.Lock()

    def _batches(self, texts: list[str], batch_size: int, batch_tokens: int = BATCH_TOKENS):
        """(positions, token embeddings, attention mask, encodings) per batch, in sentence-transformers'
        order, each batch within `batch_tokens` padded tokens (`length_groups`)."""
        everything = self.tokenizer.encode_batch(texts)
        for positions in length_groups(texts, [len(e.ids) for e in everything], batch_size, batch_tokens):
            encodings = [everything[i] for i in positions]
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for row, encoding in enumerate(encodings):
                n = len(encoding.ids)
                ids[row, :n] = encoding.ids
                mask[row, :n] = 1
                types[row, :n] = encoding.type_ids
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = types
            with self._lock:
                (hidden,) = self.session.run([self._output], feeds)
            yield positions, hidden, mask, encodings

    def encode(self, texts: list[str], batch_size: int, batch_tokens: int = BATCH_TOKENS) -> np.ndarray:
        """L2-normalised pooled vectors, shape (len(texts), dim), in the order of `texts`."""
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for positions, hidden, mask, _ in self._batches(texts, batch_size, batch_tokens):
            weights = mask[..., None].astype(np.float32)
            if self.pooling == "mean":
                pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            elif self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                pooled = np.where(weights > 0, hidden, -1e9).max(axis=1)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            vectors[positions] = pooled / np.clip(norms, 1e-12, None)
        return vectors

    def token_embeddings(self, texts: list[str], batch_size: int) -> list[tuple[Any, np.ndarray]]:
        """Per text: its `tokenizers.Encoding` (ids, offsets, special mask) and its token vectors,
        special tokens included, padding dropped."""
        out: list[tuple[Any, np.ndarray]] = [None] * len(texts)  # type: ignore[list-item]
        for positions, hidden, _, encodings in self._batches(texts, batch_size):
            for row, (position, encoding) in enumerate(zip(positions, encodings, strict=True)):
                out[position] = (encoding, np.asarray(hidden[row, : len(encoding.ids)], dtype=np.float32))
        return out
