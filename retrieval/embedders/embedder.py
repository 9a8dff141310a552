"""Sentence embeddings: the one protocol every backend serves, and the factory that picks the backend.

A local model runs on torch, ONNX or static vectors (`retrieval.embedders`, one class per backend);
`backend: openai` is an embedding server (`retrieval.embedders.endpoint_backend`). The backend is chosen
once, from the config, by `load_embedder` (local) or `shared_embedder` (any). Heavy imports (torch,
sentence_transformers, model2vec) happen when a backend is built, so importing this module is cheap.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
from typing import Any, Protocol

import numpy as np
from chunkyard.chunking.models import DEFAULT_MODEL
from chunkyard.retrieval.embedders.base import EmbedderConfigError, LocalEmbedder
from chunkyard.retrieval.embedders.endpoint_settings import ENDPOINT_BACKEND
from chunkyard.retrieval.embedders.onnx_backend import QUANTIZATIONS, OnnxEmbedder
from chunkyard.retrieval.embedders.static_backend import StaticEmbedder
from chunkyard.retrieval.embedders.torch_backend import TorchEmbedder

# The local backends by `embedder.backend`, each class declaring its `code_version`.
BACKEND_CLASSES: dict[str, type[LocalEmbedder]] = {
    "torch": TorchEmbedder,
    "onnx": OnnxEmbedder,
    "static": StaticEmbedder,
}
BACKENDS = tuple(BACKEND_CLASSES)


class Embedder(Protocol):
    """What chunking, indexing and search use of an embedding model, whichever backend serves it
    (`LocalEmbedder`'s backends and `EndpointEmbedder`)."""

    model_name: str
    model_id: str
    max_seq_length: int
    batch_size: int

    @property
    def dim(self) -> int: ...

    @property
    def tokenizer(self) -> Any: ...

    def embed(self, texts: list[str], role: str = "document") -> np.ndarray: ...

    def embed_tokens(self, text: str) -> tuple[list[tuple[int, int]], np.ndarray]: ...


def load_embedder(
    model: str = DEFAULT_MODEL,
    backend: str = "torch",
    quantize: str | None = None,
    batch_size: int = 32,
    device: str = "cpu",
    threads: int | None = None,
    pca_dims: int | None = None,
    vocabulary_size: int | None = None,
) -> LocalEmbedder:
    """A local model on the backend its options name, each option checked first (`check_options`)."""
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
        return StaticEmbedder(
            model, batch_size=batch_size, device=device, pca_dims=pca_dims, vocabulary_size=vocabulary_size
        )
    if backend == "onnx":
        return OnnxEmbedder(model, quantize=quantize, batch_size=batch_size, device=device, threads=threads)
    return TorchEmbedder(model, batch_size=batch_size, device=device, threads=threads)


_shared: dict[tuple, LocalEmbedder] = {}
_shared_lock = threading.Lock()
_load_seconds: dict[str, float] = {}


def model_load_seconds() -> dict[str, float]:
    """Seconds each model shared in this process took to load, by model name (the service's `/metrics`)."""
    return dict(_load_seconds)


def shared_embedder(model: str = DEFAULT_MODEL, /, *, queries: bool = False, **options: Any) -> Embedder:
    """One embedder per (model, options) per process: models are large and slow to load.

    Options left out count as `load_embedder`'s defaults, so callers that spell them out or not share one.
    `backend: openai` is an embedding server (`retrieval.embedders.endpoint_backend`); `queries` gives its
    query-time twin (own timeout). A local model serves queries and documents alike.
    """
    if options.get("backend") == ENDPOINT_BACKEND:
        from chunkyard.retrieval.embedders.endpoint_backend import shared_endpoint_embedder

        return shared_endpoint_embedder(model, options, queries=queries)
    defaults = _option_defaults()
    check_options(options)
    key = (model, tuple(sorted({**defaults, **options}.items())))
    with _shared_lock:
        if key not in _shared:
            started = time.perf_counter()
            _shared[key] = load_embedder(model, **options)
            _load_seconds[model] = time.perf_counter() - started
        return _shared[key]


def check_options(options: dict[str, Any]) -> None:
    """The `embedder:` options of an index config, checked without loading anything (the names,
    then each value against its backend); EmbedderConfigError names the option and what is allowed."""
    if options.get("backend") == ENDPOINT_BACKEND:  # an embedding server: its own options
        from chunkyard.retrieval.embedders.endpoint_settings import (
            EndpointConfigError,
            check_endpoint_options,
        )

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
    """`load_embedder`'s options and their defaults, read from its signature (the one list of them)."""
    parameters = inspect.signature(load_embedder).parameters
    return {name: p.default for name, p in parameters.items() if name != "model"}


def forget_shared_embedders() -> None:
    """Drop the shared embedders, as a new process starts without them (benchmarks of run start-up)."""
    with _shared_lock:
        _shared.clear()


def backend_code_version(embedder: dict[str, Any] | None) -> str:
    """The declared code version of the backend an `embedder:` mapping names (torch when none; the
    CHUNKYARD_EMBEDDER_BACKEND override included, as `embedder_for_config` reads it)."""
    backend = (embedder or {}).get("backend") or "torch"
    if backend == ENDPOINT_BACKEND:
        from chunkyard.retrieval.embedders.endpoint_backend import EndpointEmbedder

        return EndpointEmbedder.code_version
    backend = os.environ.get("CHUNKYARD_EMBEDDER_BACKEND") or backend
    if backend not in BACKEND_CLASSES:
        raise EmbedderConfigError(
            f"embedder.backend: unknown {backend!r}; expected one of {', '.join(BACKENDS)}"
        )
    return BACKEND_CLASSES[backend].code_version


def embedder_for_config(config: Any, *, queries: bool = False) -> Embedder:
    """The shared embedder an IndexConfig (or its `as_dict()`) asks for (`queries`: for a search)."""
    if isinstance(config, dict):
        model = config.get("embedding_model", DEFAULT_MODEL)
        options = dict(config.get("embedder") or {})
    else:
        model = config.embedding_model
        options = dict(config.embedder or {})
    if os.environ.get("CHUNKYARD_EMBEDDER_BACKEND") and options.get("backend") != ENDPOINT_BACKEND:
        options["backend"] = os.environ["CHUNKYARD_EMBEDDER_BACKEND"]
    return shared_embedder(model, queries=queries, **options)
