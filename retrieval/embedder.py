"""Sentence embeddings from a local model (torch, ONNX or static backend), plus contextual token vectors.

Heavy imports (torch, sentence_transformers, model2vec) happen in `__init__`, so importing this module
is cheap. The ONNX backend runs its export with onnxruntime alone (`retrieval.onnx_encoder`): torch
and sentence-transformers are imported only to make the export, once per machine. The static backend
(`retrieval.static_model`) is a lookup table distilled from the model.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chunking.model_cache import build_once, folder_digest, library_output_to_log, model_cache_dir
from chunking.models import DEFAULT_MODEL, resolve_model_path
from retrieval.endpoint_settings import ENDPOINT_BACKEND
from retrieval.onnx_encoder import BATCH_TOKENS, OnnxEncoder, length_groups

if TYPE_CHECKING:
    from retrieval.endpoint_embedder import EndpointEmbedder

BACKENDS = ("torch", "onnx", "static")
# What a text is to the model: models such as e5 prefix each with its own prompt ("query: ", "passage: ").
ROLES = ("document", "query")
QUANTIZATIONS = (None, "int8")
ONNX_FP32_FILE = "onnx/model.onnx"


class EmbedderConfigError(ValueError):
    """An embedder option is invalid; the message names the option."""


def onnx_cache_dir(model_path: str, name: str | None = None) -> Path:
    """Where the ONNX export (fp32 and int8) of a local model lives: the per-machine model cache, in a
    folder named after the model (`name`, else its folder) and the digest of its files."""
    return model_cache_dir() / "onnx" / f"{Path(name or model_path).name}-{folder_digest(model_path)}"


def model_prompts(model_path: str) -> dict[str, str]:
    """The model's own prefix per role, from its `config_sentence_transformers.json` prompts (the
    document prompt is named `document`, `passage` or `corpus` there, as sentence-transformers reads it);
    "" where it has none."""
    file = Path(model_path) / "config_sentence_transformers.json"
    prompts = (json.loads(file.read_text(encoding="utf-8")).get("prompts") or {}) if file.is_file() else {}
    document = next((prompts[name] for name in ("document", "passage", "corpus") if prompts.get(name)), "")
    return {"document": document, "query": prompts.get("query") or ""}


class Embedder:
    """An embedding model: `embed` (normalised float32 sentence vectors) and `embed_tokens`.

    `model_id` is the embedding cache key: it names the model, backend and quantisation, since
    vectors from different backends/quantisations are not interchangeable bit for bit. Texts get the
    model's own prefix for their role (`model_prompts`): documents by default, queries when asked.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        backend: str = "torch",
        quantize: str | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        threads: int | None = None,
        pca_dims: int | None = None,
        vocabulary_size: int | None = None,
    ) -> None:
        check_options(
            {
                "backend": backend,
                "quantize": quantize,
                "batch_size": batch_size,
                "device": device,
                "pca_dims": pca_dims,
                "vocabulary_size": vocabulary_size,
            }
        )
        if backend == "static":
            self._init_static(model, batch_size, device, pca_dims, vocabulary_size)
            return
        self.model_name = model
        self.backend = backend
        self.quantize = quantize
        self.batch_size = batch_size
        self.device = device
        self.model_path = resolve_model_path(model)
        self.prompts = model_prompts(self.model_path)
        self._lock = threading.Lock()
        self._threads = threads
        if backend == "torch":
            import torch
            from sentence_transformers import SentenceTransformer

            if threads:
                torch.set_num_threads(threads)
            self._model = SentenceTransformer(self.model_path, device=device, local_files_only=True)
            dimension = (
                getattr(self._model, "get_embedding_dimension", None)
                or self._model.get_sentence_embedding_dimension
            )
            self.dim: int = int(dimension())
        else:
            self._model = self._load_onnx()
            self.dim = self._model.dim
        self.max_seq_length: int = int(self._model.max_seq_length)
        suffix = "" if backend == "torch" else f"@{backend}" + (f"-{quantize}" if quantize else "")
        self.model_id: str = f"{model}{suffix}"
        self._tokenizer = None

    def _init_static(
        self, model: str, batch_size: int, device: str, pca_dims: int | None, vocabulary_size: int | None
    ) -> None:
        """The static tier: distilled once from the local model, cached under CHUNKYARD_HOME."""
        from retrieval.static_model import (
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
        self.model_name = model
        self.backend = "static"
        self.quantize = None
        self.batch_size = batch_size
        self.device = device
        self.model_path = resolve_model_path(model)
        self.prompts = model_prompts(self.model_path)
        self._lock = threading.Lock()
        self._model = load_static_model(self.model_path, self.static_settings)
        self.dim = int(self._model.dim)
        self.max_seq_length = STATIC_MAX_TOKENS
        self.model_id = f"{model}@{self.static_settings.suffix}"
        self._tokenizer = None

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
        """fp32 and int8 ONNX files into `staging`, with sentence-transformers (torch, once per machine)."""
        with library_output_to_log():
            from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

            exported = SentenceTransformer(
                self.model_path, device=self.device, backend="onnx", local_files_only=True
            )
            exported.save_pretrained(str(staging))
            base = SentenceTransformer(
                str(staging),
                device=self.device,
                backend="onnx",
                local_files_only=True,
                model_kwargs={"file_name": ONNX_FP32_FILE},
            )
            export_dynamic_quantized_onnx_model(base, "avx2", str(staging))
        for quantize in QUANTIZATIONS:  # raises if either file is unusable
            self._open_onnx(staging, quantize)

    @property
    def tokenizer(self):
        """The model's tokenizer as a `chunking.tokenizers.ModelTokenizer` (counts incl. specials)."""
        if self._tokenizer is None:
            from chunking.tokenizers import get_tokenizer

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
        if self.backend == "static":
            from retrieval.static_model import encode_static

            return encode_static(self._model, list(texts), self.batch_size, self.max_seq_length)
        if self.backend == "onnx":
            return self._model.encode(list(texts), self.batch_size)
        texts = list(texts)
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

    def embed_tokens(self, text: str) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Char spans of the model's tokens in `text` and their contextual vectors (special tokens dropped).

        Text longer than the model limit is truncated: only the first `max_seq_length` tokens
        (including [CLS]/[SEP]) are seen, so spans cover a prefix of `text`. The model's document
        prompt is read with the text, and its tokens are dropped like the special ones.
        """
        if self.backend == "static":
            raise EmbedderConfigError(
                "embedder.backend: static has no contextual token vectors (late chunking and the maxsim "
                "reranker need them); use backend torch or onnx for this index"
            )
        prefix = self.prompts["document"]
        text = prefix + text
        if self.backend == "onnx":
            ((encoding, token_vectors),) = self._model.token_embeddings([text], 1)
            offsets, special = encoding.offsets, encoding.special_tokens_mask
        else:
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
        spans: list[tuple[int, int]] = []
        keep: list[int] = []
        for i, ((start, end), is_special) in enumerate(zip(offsets, special, strict=True)):
            if is_special or end <= max(start, len(prefix)):
                continue
            spans.append((max(int(start), len(prefix)) - len(prefix), int(end) - len(prefix)))
            keep.append(i)
        return spans, token_vectors[keep]

    def token_embeddings(self, texts: list[str]) -> list[np.ndarray]:
        """Each text's contextual token vectors ([CLS] and [SEP] included, padding dropped), batched
        as `embed` batches; for late interaction (the maxsim reranker)."""
        if self.backend == "static":
            raise EmbedderConfigError("embedder.backend: static has no contextual token vectors")
        if self.backend == "onnx":
            return [vectors for _, vectors in self._model.token_embeddings(list(texts), self.batch_size)]
        with self._lock:
            outputs = self._model.encode(
                list(texts),
                output_value="token_embeddings",
                batch_size=self.batch_size,
                convert_to_numpy=False,
                show_progress_bar=False,
            )
        return [np.asarray(t.detach().cpu().numpy(), dtype=np.float32) for t in outputs]

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, dim={self.dim}, max_seq_length={self.max_seq_length})"


_shared: dict[tuple, Embedder] = {}
_shared_lock = threading.Lock()


def shared_embedder(
    model: str = DEFAULT_MODEL, /, *, queries: bool = False, **options: Any
) -> Embedder | EndpointEmbedder:
    """One Embedder per (model, options) per process: models are large and slow to load.

    Options left out count as `Embedder`'s defaults, so callers that spell them out or not share one.
    `backend: openai` is an embedding server (`retrieval.endpoint_embedder`); `queries` gives its
    query-time twin (own timeout). A local model serves queries and documents alike.
    """
    if options.get("backend") == ENDPOINT_BACKEND:
        from retrieval.endpoint_embedder import shared_endpoint_embedder

        return shared_endpoint_embedder(model, options, queries=queries)
    defaults = _option_defaults()
    check_options(options)
    key = (model, tuple(sorted({**defaults, **options}.items())))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Embedder(model, **options)
        return _shared[key]


def check_options(options: dict[str, Any]) -> None:
    """The `embedder:` options of an index config, checked without loading anything (the names,
    then each value against its backend); EmbedderConfigError names the option and what is allowed."""
    if options.get("backend") == ENDPOINT_BACKEND:  # an embedding server: its own options
        from retrieval.endpoint_settings import EndpointConfigError, check_endpoint_options

        try:
            check_endpoint_options(options)
        except EndpointConfigError as exc:
            raise EmbedderConfigError(str(exc)) from exc
        return
    defaults = _option_defaults()
    unknown = set(options) - set(defaults)
    if unknown:
        raise EmbedderConfigError(
            f"embedder: unknown option(s) {sorted(unknown)}; allowed {sorted(defaults)}"
        )
    given = {**defaults, **options}
    backend, quantize, batch_size, device = (
        given[k] for k in ("backend", "quantize", "batch_size", "device")
    )
    if backend not in BACKENDS:
        raise EmbedderConfigError(
            f"embedder.backend: unknown {backend!r}; expected one of {', '.join((*BACKENDS, ENDPOINT_BACKEND))}"
        )
    if quantize not in QUANTIZATIONS:
        raise EmbedderConfigError(f"embedder.quantize: unknown {quantize!r}; expected null or int8")
    if quantize and backend != "onnx":
        raise EmbedderConfigError("embedder.quantize: int8 quantisation needs backend: onnx")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise EmbedderConfigError(f"embedder.batch_size: must be a positive integer, got {batch_size!r}")
    if backend in ("onnx", "static") and device != "cpu":
        raise EmbedderConfigError(f"embedder.device: the {backend} backend runs on the CPU, got {device!r}")
    if not isinstance(device, str):
        raise EmbedderConfigError(f"embedder.device: expected cpu or cuda, got {device!r}")
    threads = given["threads"]
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise EmbedderConfigError(f"embedder.threads: must be a positive integer, got {threads!r}")
    if backend != "static":
        for option in ("pca_dims", "vocabulary_size"):
            if given[option] is not None:
                raise EmbedderConfigError(f"embedder.{option}: only the static backend is distilled")


@functools.cache
def _option_defaults() -> dict[str, Any]:
    """`Embedder`'s options and their defaults, read from its signature (the one list of them)."""
    parameters = inspect.signature(Embedder.__init__).parameters
    return {name: p.default for name, p in parameters.items() if name not in ("self", "model")}


def forget_shared_embedders() -> None:
    """Drop the shared Embedders, as a new process starts without them (benchmarks of run start-up)."""
    with _shared_lock:
        _shared.clear()


def embedder_for_config(config: Any, *, queries: bool = False) -> Embedder | EndpointEmbedder:
    """The shared Embedder an IndexConfig (or its `as_dict()`) asks for (`queries`: for a search)."""
    if isinstance(config, dict):
        model = config.get("embedding_model", DEFAULT_MODEL)
        options = dict(config.get("embedder") or {})
    else:
        model = config.embedding_model
        options = dict(config.embedder or {})
    if os.environ.get("CHUNKYARD_EMBEDDER_BACKEND") and options.get("backend") != ENDPOINT_BACKEND:
        options["backend"] = os.environ["CHUNKYARD_EMBEDDER_BACKEND"]
    return shared_embedder(model, queries=queries, **options)
