"""Field checks of the settings files' entries, each error naming `file:line`, the field and what is allowed.

Below `retrieval.settings.config` (which reads the files) and beside `retrieval.settings.project` (which finds them):
a value of the wrong shape is refused where it is read, before anything runs, so `indexes:
recursive-256` (a string, not a list) is not read as the configs 'r', 'e', 'c', ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chunkyard.retrieval.lexical.analysis import AnalyzerConfigError, analyzer_setting, validate_analyzer
from chunkyard.retrieval.lexical.bm25_params import Bm25Params
from chunkyard.retrieval.settings.index_defaults import COARSE_DEFAULT_RANK
from chunkyard.retrieval.settings.project import SettingsError

VECTOR_STORAGES = ("vector", "halfvec")  # how an index stores its vectors (pgvector types)

# The index config's fields (any other is refused), each with whether it shapes what an evaluation
# measures: the fields an evaluation's code version hashes (`EVALUATED_FIELDS`, read by
# pipeline/steps/evaluation.py), so one declaration serves both. Their order is part of that hash.
INDEX_FIELDS: dict[str, bool] = {
    "chunker": True,
    "embedding_model": True,
    "embedder": True,
    "bm25": True,
    "hybrid": True,
    "rerank": True,
    "context_scoring": True,
    "collapse_duplicates": True,
    "coarse": True,
    "description": False,
    "allow_truncation": False,
    "vector_storage": False,
}
EVALUATED_FIELDS = tuple(name for name, evaluated in INDEX_FIELDS.items() if evaluated)


def field_at(path: Path, entry: Any, key: str, fallback: str) -> str:
    """`file:line` of `key` in an entry read with line marks, else `fallback` (the entry's own)."""
    line = getattr(entry, "lines", {}).get(key)
    return f"{path}:{line}" if line else fallback


def where_field(path: Path, entry: Any, key: str, where: str) -> str:
    """`file:line: section.name.key` for field `key` of the entry located by `where` (`file:line: section.name`)."""
    located, _, dotted = where.partition(": ")
    return f"{field_at(path, entry, key, located)}: {dotted}.{key}"


def string_list(value: Any, where: str, what: str, *, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    """A YAML list of non-empty strings (absent or null: `default`)."""
    if value is None:
        return default
    if isinstance(value, str):
        raise SettingsError(f"{where}: expected a list of {what}, got the string {value!r}; write [{value}]")
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise SettingsError(f"{where}: expected a list of {what}, got {value!r}")
    return tuple(value)


def optional_text(value: Any, where: str) -> str | None:
    """A non-empty string, or absent."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def text(value: Any, where: str) -> str:
    """A string (descriptions); absent is empty."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SettingsError(f"{where}: expected a string, got {value!r}")
    return value


def checked_vector_storage(raw: Any, where: str) -> str:
    """`vector_storage: vector | halfvec` (whether the server has halfvec is checked at publish)."""
    if raw not in VECTOR_STORAGES:
        raise SettingsError(f"{where}: expected one of {list(VECTOR_STORAGES)}, got {raw!r}")
    return str(raw)


COARSE_KEYS = ("config", "min_gap", "rank")


def checked_coarse(raw: Any, where: str) -> dict[str, Any]:
    """Validate `coarse: {config: NAME, min_gap: 0.18, rank: 5}` (the reference is checked later)."""
    if raw in (None, {}):
        return {}
    if not isinstance(raw, dict) or not {"config", "min_gap"} <= set(raw) or set(raw) - set(COARSE_KEYS):
        raise SettingsError(
            f"{where}: expected a mapping with `config` and `min_gap` (and optionally `rank`), got {raw!r}"
        )
    if not isinstance(raw["config"], str) or not raw["config"]:
        raise SettingsError(f"{where}.config: must be the name of another index config")
    gap = raw["min_gap"]
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not 0.0 <= gap <= 1.0:
        raise SettingsError(f"{where}.min_gap: must be a number between 0 and 1, got {gap!r}")
    rank = raw.get("rank", COARSE_DEFAULT_RANK)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 2 <= rank <= 100:
        raise SettingsError(f"{where}.rank: must be an integer between 2 and 100, got {rank!r}")
    return {"config": raw["config"], "min_gap": float(gap), "rank": rank}


BM25_KEYS = ("k1", "b", "epsilon", "analyzer")


def validate_bm25(bm25: Any, where: str) -> None:
    """`bm25: {k1, b, epsilon, analyzer}`; analyzer is `auto` (the default), a language or a mapping."""
    if not isinstance(bm25, dict):
        raise SettingsError(f"{where}.bm25: must be a mapping, got {bm25!r}")
    unknown = set(bm25) - set(BM25_KEYS)
    if unknown:
        raise SettingsError(f"{where}.bm25: unknown field(s) {sorted(unknown)}; allowed {list(BM25_KEYS)}")
    try:
        validate_analyzer(analyzer_setting(bm25))
        Bm25Params.from_config(bm25)
    except (AnalyzerConfigError, TypeError, ValueError) as exc:
        raise SettingsError(
            f"{where}.{exc}" if str(exc).startswith("bm25") else f"{where}.bm25: {exc}"
        ) from exc


# Embedder options that only some backends read: inherited from the defaults, they are dropped for
# any other backend (a config naming `backend: openai` does not have to unset the defaults' int8).
_BACKEND_ONLY_OPTIONS = {"quantize": ("onnx",), "device": ("onnx", "torch", "static")}


def inherited_embedder(defaults: Any, own: Any) -> Any:
    """An index config's `embedder:` over the defaults', without the inherited options its backend
    does not read; what the config itself sets is kept (and checked) as written."""
    if not isinstance(defaults, dict) or not isinstance(own, dict):
        return own if own is not None else defaults
    merged = {**defaults, **own}
    backend = merged.get("backend")
    return {
        key: value
        for key, value in merged.items()
        if key in own or backend in _BACKEND_ONLY_OPTIONS.get(key, (backend,))
    }
