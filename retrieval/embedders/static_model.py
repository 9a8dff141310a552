"""The static-embedding tier: a model2vec model distilled offline from the local sentence model, cached.

Distillation runs the source model once over every word piece of its vocabulary ([CLS] piece [SEP],
mean-pooled), reduces the vectors with PCA and weights them by Zipf rank (SIF); embedding a text is
then a table lookup and a mean, with no transformer at query or index time. Nothing is downloaded:
the source is the local model folder (`chunking.models.resolve_model_path`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from chunkyard.chunking.model_cache import build_once, folder_digest, library_output_to_log, model_cache_dir

if TYPE_CHECKING:
    from model2vec import StaticModel

# A static model has no position limit; texts are cut at this many word pieces (model2vec's default).
STATIC_MAX_TOKENS = 512
DEFAULT_PCA_DIMS = 256


class StaticModelError(ValueError):
    """A static-tier option is invalid; the message names the option."""


@dataclass(frozen=True)
class StaticSettings:
    """How the static model is distilled: `pca_dims` output dimensions; `vocabulary_size` keeps only
    the first N word-piece ids of the source vocabulary (fewer forward passes, pieces past N become
    unknown; for quick tests), None keeps all of it."""

    pca_dims: int = DEFAULT_PCA_DIMS
    vocabulary_size: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.pca_dims, bool) or not isinstance(self.pca_dims, int) or self.pca_dims < 2:
            raise StaticModelError(f"embedder.pca_dims: must be an integer >= 2, got {self.pca_dims!r}")
        size = self.vocabulary_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 100):
            raise StaticModelError(
                f"embedder.vocabulary_size: must be an integer >= 100 or null (all), got {size!r}"
            )

    @property
    def suffix(self) -> str:
        """`static`, plus the non-default settings (part of the model id: the vectors differ)."""
        parts = ["static"]
        if self.pca_dims != DEFAULT_PCA_DIMS:
            parts.append(f"pca{self.pca_dims}")
        if self.vocabulary_size is not None:
            parts.append(f"v{self.vocabulary_size}")
        return "-".join(parts)


def static_cache_dir(model_path: str, settings: StaticSettings) -> Path:
    """Where the distilled model of a local model lives: the per-machine model cache's `static/`."""
    return (
        model_cache_dir()
        / "static"
        / f"{Path(model_path).name}-{folder_digest(model_path)}-{settings.suffix}"
    )


def load_static_model(model_path: str, settings: StaticSettings) -> StaticModel:
    """The cached static model of `model_path`, distilled (or re-distilled if unusable) first."""
    return build_once(
        static_cache_dir(model_path, settings),
        lambda staging: distil_static_model(model_path, settings, staging),
        _open,
        f"the static model of {Path(model_path).name} ({settings.suffix})",
    )


def _open(folder: Path) -> StaticModel:
    """A saved static model, checked by embedding a probe sentence."""
    from model2vec import StaticModel

    model = StaticModel.from_pretrained(str(folder), force_download=False)
    vector = np.asarray(model.encode(["probe sentence"], use_multiprocessing=False), dtype=np.float32)
    if vector.ndim != 2 or not np.isfinite(vector).all() or not np.linalg.norm(vector) > 0:
        raise ValueError(f"{folder}: the probe embedding is not a finite non-zero vector")
    return model


def distil_static_model(model_path: str, settings: StaticSettings, staging: Path) -> None:
    """Distil the model into the folder `staging` (`build_once` verifies it and moves it into place)."""
    with library_output_to_log():
        from model2vec.distill import distill_from_model
        from transformers import AutoModel, AutoTokenizer

        model = AutoModel.from_pretrained(model_path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True, use_fast=True)
        static = distill_from_model(
            model,
            tokenizer,
            device="cpu",
            pca_dims=settings.pca_dims,
            token_remove_pattern=_remove_pattern(tokenizer.get_vocab(), settings.vocabulary_size),
        )
        static.save_pretrained(str(staging))


def _remove_pattern(vocabulary: dict[str, int], vocabulary_size: int | None) -> str:
    r"""model2vec's token filter: `[unusedN]` always; with a size, also every piece whose id is past it.

    The pattern is a trie of the pieces to drop (a plain alternation of ~30k literals would be tried
    one by one per token); special tokens ([CLS], [UNK], ...) are kept.
    """
    unused = r"\[unused\d+\]"
    if vocabulary_size is None:
        return unused
    drop = sorted(
        piece
        for piece, index in vocabulary.items()
        if index >= vocabulary_size and not (piece.startswith("[") and piece.endswith("]"))
    )
    return rf"(?:{unused}|{_trie_regex(drop)})\Z" if drop else unused


def _trie_regex(words: list[str]) -> str:
    """A regex matching exactly `words`, grouped by common prefixes."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict) -> str:
        ends = "" in node
        branches = [re.escape(char) + emit(child) for char, child in node.items() if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 and not ends else "(?:" + "|".join(branches) + ")"
        return body + "?" if ends else body

    return emit(trie)


def encode_static(model: StaticModel, texts: list[str], batch_size: int, max_tokens: int) -> np.ndarray:
    """L2-normalised float32 vectors; a text with no known word piece gets the [UNK] piece's vector."""
    vectors = np.asarray(
        model.encode(texts, max_length=max_tokens, batch_size=batch_size, use_multiprocessing=False),
        dtype=np.float32,
    )
    norms = np.linalg.norm(vectors, axis=1)
    empty = norms == 0
    if empty.any():
        vectors[empty] = _unknown_vector(model)
        norms[empty] = 1.0
    return np.ascontiguousarray(vectors / norms[:, None], dtype=np.float32)


def _unknown_vector(model: StaticModel) -> np.ndarray:
    """The unit vector given to texts without any known piece (empty, or only unknown characters)."""
    if model.unk_token_id is not None:
        vector = np.asarray(model.embedding[model.unk_token_id], dtype=np.float32)
        if np.linalg.norm(vector) > 0:
            return vector / np.linalg.norm(vector)
    vector = np.zeros(model.dim, dtype=np.float32)
    vector[0] = 1.0
    return vector
