"""Index and collection configs: the YAML files under configs/ as typed, validated objects."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chunking.models import DEFAULT_MODEL
from retrieval.analysis import AnalyzerConfigError, analyzer_setting, validate_analyzer
from retrieval.bm25 import Bm25Params
from retrieval.names import IndexName
from retrieval.options import COARSE_DEFAULT_RANK, ContextConfigError, ContextScoring


class ConfigError(ValueError):
    """A config file or entry is invalid; the message names the file, entry and field."""


def project_root() -> Path:
    """The folder holding configs/: CHUNKYARD_PROJECT_DIR, else the current directory, else the package's."""
    env = os.environ.get("CHUNKYARD_PROJECT_DIR")
    if env:
        return Path(env).resolve()
    cwd = Path.cwd()
    if (cwd / "configs").is_dir():
        return cwd
    return Path(__file__).resolve().parent.parent


def configs_dir() -> Path:
    return Path(os.environ.get("CHUNKYARD_CONFIGS", project_root() / "configs")).resolve()


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def stable_hash(obj: Any, length: int = 12) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:length]


_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass(frozen=True)
class IndexConfig:
    """One index config: chunking strategy + parameters + embedding model + retrieval options."""

    name: str
    chunker: dict[str, Any]
    embedding_model: str = DEFAULT_MODEL
    embedder: dict[str, Any] = field(default_factory=dict)
    bm25: dict[str, Any] = field(default_factory=dict)
    hybrid: dict[str, Any] = field(default_factory=dict)
    rerank: dict[str, Any] = field(default_factory=dict)
    # Query-time context scoring of candidates with the text around them (`retrieval.query.context_scoring`);
    # like `hybrid`, it does not change the chunks, so it is not part of the config hash.
    context_scoring: dict[str, Any] = field(default_factory=dict)
    # Identical chunk texts (repeated passages) take one result slot: the earliest copy is returned.
    collapse_duplicates: bool = False
    # Adaptive granularity: `{config: NAME, min_gap: 0.18, rank: 5}`. When the ranking is ambiguous
    # (the score gap between the first and the `rank`-th result is below `min_gap`), it is answered
    # by the same collection's index with config NAME (larger chunks) instead. Query-time only.
    coarse: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    # Chunks may exceed the embedding model's input limit (the model truncates them); the
    # token-limit check then reports the truncated share instead of failing.
    allow_truncation: bool = False

    @property
    def config_hash(self) -> str:
        """Hash of everything that shapes the index content; part of every chunk id."""
        return stable_hash(
            {"chunker": self.chunker, "embedding_model": self.embedding_model, "bm25": self.bm25}
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "chunker": self.chunker,
            "embedding_model": self.embedding_model,
            "embedder": self.embedder,
            "bm25": self.bm25,
            "hybrid": self.hybrid,
            "rerank": self.rerank,
            "context_scoring": self.context_scoring,
            "collapse_duplicates": self.collapse_duplicates,
            "coarse": self.coarse,
            "allow_truncation": self.allow_truncation,
        }


@dataclass(frozen=True)
class CollectionConfig:
    """Where a collection's documents come from: folders (with globs) or a named dataset."""

    name: str
    folders: tuple[str, ...] = ()
    include: tuple[str, ...] = ("**/*",)
    exclude: tuple[str, ...] = ()
    dataset: str | None = None
    eval_set: str | None = None
    indexes: tuple[str, ...] = ()
    description: str = ""

    def folder_paths(self) -> list[Path]:
        root = project_root()
        return [(root / f).resolve() if not Path(f).is_absolute() else Path(f) for f in self.folders]


@dataclass(frozen=True)
class IndexSpec:
    """One concrete index: a collection indexed with a config."""

    collection: str
    config: IndexConfig

    @property
    def name(self) -> IndexName:
        """The index's id in the database and the API: `collection/config`."""
        return IndexName(self.collection, self.config.name)


# The search mode picks the fusion (`hybrid` = reciprocal rank fusion, `hybrid_weighted` = weighted
# min-max-normalised scores); the config gives their parameters.
_HYBRID_KEYS = {"rrf_k", "weight", "candidates"}
_INDEX_KEYS = {
    "chunker",
    "embedding_model",
    "embedder",
    "bm25",
    "hybrid",
    "rerank",
    "context_scoring",
    "collapse_duplicates",
    "coarse",
    "description",
    "allow_truncation",
}
_COLLECTION_KEYS = {"folders", "include", "exclude", "dataset", "eval_set", "indexes", "description"}


def load_index_configs(path: str | Path | None = None) -> dict[str, IndexConfig]:
    path = Path(path) if path else configs_dir() / "indexes.yaml"
    raw = _read_yaml(path)
    defaults = raw.get("defaults") or {}
    entries = raw.get("indexes")
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{path}: needs a non-empty mapping `indexes:`")
    configs: dict[str, IndexConfig] = {}
    for name, entry in entries.items():
        where = f"{path}: indexes.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}: name must be lowercase letters, digits, '-', '_' or '.'")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a mapping")
        unknown = set(entry) - _INDEX_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}; allowed {sorted(_INDEX_KEYS)}")
        merged = _deep_merge(defaults, entry)
        unknown_hybrid = set(merged.get("hybrid") or {}) - _HYBRID_KEYS
        if unknown_hybrid:
            raise ConfigError(
                f"{where}.hybrid: unknown field(s) {sorted(unknown_hybrid)}; allowed {sorted(_HYBRID_KEYS)} "
                "(the search mode chooses the fusion: hybrid = RRF, hybrid_weighted = weighted scores)"
            )
        context_scoring = merged.get("context_scoring") or {}
        try:
            ContextScoring.from_config(context_scoring, where=f"{where}.context_scoring")
        except ContextConfigError as exc:
            raise ConfigError(str(exc)) from exc
        _validate_bm25(merged.get("bm25") or {}, where)
        chunker = merged.get("chunker")
        if not isinstance(chunker, dict) or "strategy" not in chunker:
            raise ConfigError(f"{where}.chunker: must be a mapping with a `strategy`")
        configs[name] = IndexConfig(
            name=name,
            chunker=chunker,
            embedding_model=merged.get("embedding_model", DEFAULT_MODEL),
            embedder=merged.get("embedder") or {},
            bm25=merged.get("bm25") or {},
            hybrid=merged.get("hybrid") or {},
            rerank=merged.get("rerank") or {},
            context_scoring=context_scoring,
            collapse_duplicates=_as_bool(
                merged.get("collapse_duplicates", False), f"{where}.collapse_duplicates"
            ),
            coarse=_coarse(merged.get("coarse"), f"{where}.coarse"),
            description=merged.get("description", ""),
            allow_truncation=_as_bool(merged.get("allow_truncation", False), f"{where}.allow_truncation"),
        )
    for name, config in configs.items():
        if not config.coarse:
            continue
        target = config.coarse["config"]
        where = f"{path}: indexes.{name}.coarse.config"
        if target not in configs:
            raise ConfigError(f"{where}: unknown index config {target!r}; known: {sorted(configs)}")
        if target == name or configs[target].coarse:
            raise ConfigError(f"{where}: {target!r} must be a plain index config (no `coarse` of its own)")
    return configs


COARSE_KEYS = ("config", "min_gap", "rank")


def _coarse(raw: Any, where: str) -> dict[str, Any]:
    """Validate `coarse: {config: NAME, min_gap: 0.18, rank: 5}` (the reference is checked later)."""
    if raw in (None, {}):
        return {}
    if not isinstance(raw, dict) or not {"config", "min_gap"} <= set(raw) or set(raw) - set(COARSE_KEYS):
        raise ConfigError(
            f"{where}: expected a mapping with `config` and `min_gap` (and optionally `rank`), got {raw!r}"
        )
    if not isinstance(raw["config"], str) or not raw["config"]:
        raise ConfigError(f"{where}.config: must be the name of another index config")
    gap = raw["min_gap"]
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not 0.0 <= gap <= 1.0:
        raise ConfigError(f"{where}.min_gap: must be a number between 0 and 1, got {gap!r}")
    rank = raw.get("rank", COARSE_DEFAULT_RANK)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 2 <= rank <= 100:
        raise ConfigError(f"{where}.rank: must be an integer between 2 and 100, got {rank!r}")
    return {"config": raw["config"], "min_gap": float(gap), "rank": rank}


def with_coarse_companions(names: list[str], configs: dict[str, IndexConfig]) -> list[str]:
    """`names` plus every config one of them falls back to, each coarse config before its user."""
    out: list[str] = []
    for name in names:
        target = configs[name].coarse.get("config") if name in configs else None
        for item in (target, name):
            if item and item not in out:
                out.append(item)
    return out


BM25_KEYS = ("k1", "b", "epsilon", "analyzer")


def _validate_bm25(bm25: Any, where: str) -> None:
    """`bm25: {k1, b, epsilon, analyzer}`; analyzer is `auto` (the default), a language or a mapping."""
    if not isinstance(bm25, dict):
        raise ConfigError(f"{where}.bm25: must be a mapping, got {bm25!r}")
    unknown = set(bm25) - set(BM25_KEYS)
    if unknown:
        raise ConfigError(f"{where}.bm25: unknown field(s) {sorted(unknown)}; allowed {list(BM25_KEYS)}")
    try:
        validate_analyzer(analyzer_setting(bm25))
        Bm25Params.from_config(bm25)
    except (AnalyzerConfigError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{where}.{exc}" if str(exc).startswith("bm25") else f"{where}.bm25: {exc}"
        ) from exc


def _as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be true or false, got {value!r}")
    return value


def load_collection_configs(path: str | Path | None = None) -> dict[str, CollectionConfig]:
    path = Path(path) if path else configs_dir() / "collections.yaml"
    raw = _read_yaml(path)
    entries = raw.get("collections")
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{path}: needs a non-empty mapping `collections:`")
    collections: dict[str, CollectionConfig] = {}
    for name, entry in entries.items():
        where = f"{path}: collections.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}: name must be lowercase letters, digits, '-', '_' or '.'")
        entry = entry or {}
        unknown = set(entry) - _COLLECTION_KEYS
        if unknown:
            raise ConfigError(
                f"{where}: unknown field(s) {sorted(unknown)}; allowed {sorted(_COLLECTION_KEYS)}"
            )
        if not entry.get("folders") and not entry.get("dataset"):
            raise ConfigError(f"{where}: needs `folders` or `dataset`")
        collections[name] = CollectionConfig(
            name=name,
            folders=tuple(entry.get("folders") or ()),
            include=tuple(entry.get("include") or ("**/*",)),
            exclude=tuple(entry.get("exclude") or ()),
            dataset=entry.get("dataset"),
            eval_set=entry.get("eval_set"),
            indexes=tuple(entry.get("indexes") or ()),
            description=entry.get("description", ""),
        )
    return collections


def load_index_specs(
    indexes_path: str | Path | None = None, collections_path: str | Path | None = None
) -> list[IndexSpec]:
    """Every (collection, config) pair the config files declare, validated against each other."""
    configs = load_index_configs(indexes_path)
    specs = []
    for collection in load_collection_configs(collections_path).values():
        for config_name in collection.indexes:
            if config_name not in configs:
                raise ConfigError(
                    f"collections.{collection.name}.indexes: unknown index config {config_name!r}; "
                    f"known: {sorted(configs)}"
                )
        # A config with `coarse` needs its coarse index in the same collection: it is built too.
        for config_name in with_coarse_companions(list(collection.indexes), configs):
            specs.append(IndexSpec(collection.name, configs[config_name]))
    return specs


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data
