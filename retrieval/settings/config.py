"""Index configs and collections as typed, validated objects: the project file (chunkyard.yaml) over the
bundled settings files in configs/ (the project is found like git's: the nearest chunkyard.yaml up)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkyard.chunking.models import DEFAULT_MODEL
from chunkyard.retrieval.embedders.endpoint_settings import (
    EndpointConfigError,
    check_endpoint_options,
    endpoint_identity,
)
from chunkyard.retrieval.settings.config_fields import (
    INDEX_FIELDS,
    checked_coarse,
    checked_vector_storage,
    inherited_embedder,
    optional_text,
    string_list,
    text,
    validate_bm25,
    where_field,
)
from chunkyard.retrieval.settings.index_defaults import ContextConfigError, ContextScoring
from chunkyard.retrieval.settings.names import IndexName, is_valid_name
from chunkyard.retrieval.settings.project import (
    PROJECT_FILE,
    SettingsError,
    as_bool,
    at_line,
    benchmarks_enabled,
    configs_dir,
    project_root,
    read_project,
    read_yaml,
)
from chunkyard.retrieval.settings.promotion_policy import PromotionPolicy, read_promotion_policy


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
    # Query-time context scoring of candidates with the text around them (`retrieval.query.context`);
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
    # How the HNSW graph stores vectors: `vector` (float32) or `halfvec` (float16, about half the
    # index size; pgvector >= 0.7). The chunk rows keep float32 either way.
    vector_storage: str = "vector"
    # `file:line` of the entry, for errors about it (`retrieval.settings.config_checks`).
    source: str = field(default="", compare=False)
    # Where `embedding_model` comes from when the entry does not set it: "defaults" (the bundled
    # defaults), or the collection whose choice it inherits (`retrieval.settings.inherited_model`); "" when set.
    model_from: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        checked_vector_storage(self.vector_storage, f"indexes.{self.name}.vector_storage")

    @property
    def config_hash(self) -> str:
        """Hash of everything that shapes the index content; part of every chunk id."""
        shaped: dict[str, Any] = {
            "chunker": self.chunker,
            "embedding_model": self.embedding_model,
            "bm25": self.bm25,
        }
        if self.vector_storage != "vector":  # only when set, so existing indexes keep their hash and ids
            shaped["vector_storage"] = self.vector_storage
        endpoint = endpoint_identity(self.embedder or {})
        if endpoint:  # an embedding server's model replaces `embedding_model`'s vectors
            shaped["embedder"] = endpoint
        return stable_hash(shaped)

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
            **({"vector_storage": self.vector_storage} if self.vector_storage != "vector" else {}),
        }


@dataclass(frozen=True)
class Collection:
    """Where a collection's documents come from: folders (with globs) or a named dataset."""

    name: str
    folders: tuple[str, ...] = ()
    include: tuple[str, ...] = ("**/*",)
    exclude: tuple[str, ...] = ()
    dataset: str | None = None
    eval_set: str | None = None
    indexes: tuple[str, ...] = ()
    description: str = ""
    # A benchmark collection (chroma_general) is built only when benchmarks are enabled.
    benchmark: bool = False
    # `serve:`, how its leaderboard's winner is promoted to an alias (None: no promotion asset)
    serve: PromotionPolicy | None = None
    # A folder that does not exist is indexed as empty instead of stopping `chunkyard index`.
    allow_empty: bool = False
    # Scanned pages and image files are read by OCR (chunking/documents/ocr.py); `ocr: false` skips them.
    ocr: bool = True
    # The index config a search of this collection reads when it names none (`retrieval.settings.default_index`).
    default_index: str | None = None
    # `file:line` of the entry, for errors about it.
    source: str = field(default="", compare=False)

    def folder_paths(self) -> list[Path]:
        root = project_root()
        return [(root / f).resolve() if not Path(f).is_absolute() else Path(f) for f in self.folders]


@dataclass(frozen=True)
class IndexSpec:
    """One concrete index: a collection indexed with an index config."""

    collection: str
    config: IndexConfig

    @property
    def name(self) -> IndexName:
        """The index's id in the database and the API: `collection/config`."""
        return IndexName(self.collection, self.config.name)


# The search mode picks the fusion (`hybrid` = reciprocal rank fusion, `hybrid_weighted` = weighted
# min-max-normalised scores); the config gives their parameters.
_HYBRID_KEYS = {"rrf_k", "weight", "candidates", "trust_dense"}
_INDEX_KEYS = set(INDEX_FIELDS)
_COLLECTION_KEYS = {
    "folders",
    "include",
    "exclude",
    "dataset",
    "eval_set",
    "indexes",
    "description",
    "benchmark",
    "serve",
    "allow_empty",
    "ocr",
    "default_index",
}


def _project_overlay() -> tuple[Path, dict[str, Any]] | None:
    """The project file and its contents when the settings come from the project (no CHUNKYARD_CONFIGS)."""
    if os.environ.get("CHUNKYARD_CONFIGS"):
        return None
    root = project_root()
    return root / PROJECT_FILE, read_project(root)


def load_index_configs(path: str | Path | None = None) -> dict[str, IndexConfig]:
    """The index configs of `path`; by default the bundled ones plus (by name, replacing a bundled
    one) the `indexes:` of the project's chunkyard.yaml, all with the bundled `defaults`."""
    path = Path(path) if path else configs_dir() / "indexes.yaml"
    raw = read_yaml(path)
    defaults = raw.get("defaults") or {}
    entries = raw.get("indexes")
    if not isinstance(entries, dict) or not entries:
        raise SettingsError(f"{path}: needs a non-empty mapping `indexes:`")
    sources = {name: (path, entries) for name in entries}
    overlay = _project_overlay() if path == configs_dir() / "indexes.yaml" else None
    if overlay and overlay[1].get("indexes"):
        project_entries = overlay[1]["indexes"]
        entries = {**entries, **project_entries}
        sources.update({name: (overlay[0], project_entries) for name in project_entries})
    configs: dict[str, IndexConfig] = {}
    for name, entry in entries.items():
        where = f"{at_line(sources[name][0], sources[name][1], name)}: indexes.{name}"
        if not isinstance(name, str) or not is_valid_name(name):
            raise SettingsError(f"{where}: name must be lowercase letters, digits, '-', '_' or '.'")
        if not isinstance(entry, dict):
            raise SettingsError(f"{where}: must be a mapping")
        unknown = sorted(set(entry) - _INDEX_KEYS)
        source = sources[name][0]

        def at(key: str, where: str = where, source: Path = source, entry: Any = entry) -> str:
            return where_field(source, entry, key, where)

        if unknown:
            raise SettingsError(
                f"{at(unknown[0])}: unknown field(s) {unknown}; allowed {sorted(_INDEX_KEYS)}"
            )
        merged = _deep_merge(defaults, entry)
        if "embedder" in entry:  # the defaults' options its backend does not read are dropped
            merged["embedder"] = inherited_embedder(defaults.get("embedder"), entry["embedder"])
        unknown_hybrid = set(merged.get("hybrid") or {}) - _HYBRID_KEYS
        if unknown_hybrid:
            raise SettingsError(
                f"{at('hybrid')}: unknown field(s) {sorted(unknown_hybrid)}; allowed {sorted(_HYBRID_KEYS)} "
                "(the search mode chooses the fusion: hybrid = RRF, hybrid_weighted = weighted scores)"
            )
        trust = (merged.get("hybrid") or {}).get("trust_dense", False)
        if not isinstance(trust, bool):
            raise SettingsError(f"{at('hybrid')}.trust_dense: expected true or false, got {trust!r}")
        context_scoring = merged.get("context_scoring") or {}
        try:
            ContextScoring.from_config(context_scoring, where=at("context_scoring"))
        except ContextConfigError as exc:
            raise SettingsError(str(exc)) from exc
        validate_bm25(merged.get("bm25") or {}, at("bm25").removesuffix(".bm25"))
        try:  # an embedding server's options now; a local model's when it loads
            check_endpoint_options(merged.get("embedder") or {})
        except EndpointConfigError as exc:
            raise SettingsError(f"{at('embedder').removesuffix('.embedder')}.{exc}") from exc
        chunker = merged.get("chunker")
        if not isinstance(chunker, dict) or "strategy" not in chunker:
            raise SettingsError(f"{at('chunker')}: must be a mapping with a `strategy`")
        if not isinstance(merged.get("embedder") or {}, dict):
            raise SettingsError(f"{at('embedder')}: must be a mapping, got {merged['embedder']!r}")
        configs[name] = IndexConfig(
            name=name,
            chunker=chunker,
            embedding_model=optional_text(merged.get("embedding_model"), at("embedding_model"))
            or DEFAULT_MODEL,
            embedder=merged.get("embedder") or {},
            bm25=merged.get("bm25") or {},
            hybrid=merged.get("hybrid") or {},
            rerank=merged.get("rerank") or {},
            context_scoring=context_scoring,
            collapse_duplicates=as_bool(merged.get("collapse_duplicates", False), at("collapse_duplicates")),
            coarse=checked_coarse(merged.get("coarse"), at("coarse")),
            description=text(merged.get("description"), at("description")),
            allow_truncation=as_bool(merged.get("allow_truncation", False), at("allow_truncation")),
            vector_storage=checked_vector_storage(
                merged.get("vector_storage", "vector"), at("vector_storage")
            ),
            source=where.rpartition(": indexes.")[0],
            model_from="" if "embedding_model" in entry else "defaults",
        )
    for name, config in configs.items():
        if not config.coarse:
            continue
        target = config.coarse["config"]
        where = f"{at_line(sources[name][0], sources[name][1], name)}: indexes.{name}.coarse.config"
        if target not in configs:
            raise SettingsError(f"{where}: unknown index config {target!r}; known: {sorted(configs)}")
        if target == name or configs[target].coarse:
            raise SettingsError(f"{where}: {target!r} must be a plain index config (no `coarse` of its own)")
    return configs


def with_coarse_companions(names: list[str], configs: dict[str, IndexConfig]) -> list[str]:
    """`names` plus every config one of them falls back to, each coarse config before its user."""
    out: list[str] = []
    for name in names:
        target = configs[name].coarse.get("config") if name in configs else None
        for item in (target, name):
            if item and item not in out:
                out.append(item)
    return out


def default_collection() -> str:
    """The collection a bare index config name means, in the CLI, the HTTP API and Python alike: the
    project's only collection; else (several, or no project) `demo`."""
    from chunkyard.retrieval.settings.names import DEFAULT_COLLECTION
    from chunkyard.retrieval.settings.project import ProjectError

    try:
        names = list(load_collections())
    except ProjectError:
        return DEFAULT_COLLECTION
    return names[0] if len(names) == 1 else DEFAULT_COLLECTION


def load_collections(
    path: str | Path | None = None, *, include_benchmarks: bool | None = None
) -> dict[str, Collection]:
    """The collections of `path`; by default the project's: the `collections:` of its chunkyard.yaml
    (the bundled collections when it has none). Benchmark collections (`benchmark: true`) are kept
    only when `include_benchmarks` (default: `benchmarks_enabled()`); the bundled ones are then added."""
    located: dict[str, tuple[Path, dict[str, Any]]] = {}
    project: dict[str, Any] | None = None
    if path:
        path = Path(path)
        entries = _collection_entries(path, read_yaml(path))
        located = {name: (path, entries) for name in entries}
    else:
        bundled = configs_dir() / "collections.yaml"
        bundled_entries = _collection_entries(bundled, read_yaml(bundled))
        overlay = _project_overlay()
        project = overlay[1] if overlay else None
        if overlay and "collections" in overlay[1]:
            own = overlay[1]["collections"] or {}
            located = {name: (overlay[0], own) for name in own}
            # the bundled benchmark collections can be switched on in any project
            located.update(
                {
                    name: (bundled, bundled_entries)
                    for name, entry in bundled_entries.items()
                    if name not in own and (entry or {}).get("benchmark")
                }
            )
        else:
            located = {name: (bundled, bundled_entries) for name in bundled_entries}
    keep_benchmarks = benchmarks_enabled(project) if include_benchmarks is None else include_benchmarks
    collections: dict[str, Collection] = {}
    for name, (source, mapping) in located.items():
        entry = mapping[name]
        where = f"{at_line(source, mapping, name)}: collections.{name}"
        if not isinstance(name, str) or not is_valid_name(name):
            raise SettingsError(f"{where}: name must be lowercase letters, digits, '-', '_' or '.'")
        entry = entry or {}
        if not isinstance(entry, dict):
            raise SettingsError(f"{where}: must be a mapping (folders, include, indexes, ...), got {entry!r}")
        unknown = sorted(set(entry) - _COLLECTION_KEYS)
        if unknown:
            raise SettingsError(
                f"{where_field(source, entry, unknown[0], where)}: unknown field(s) {unknown}; "
                f"allowed {sorted(_COLLECTION_KEYS)}"
            )
        if not entry.get("folders") and not entry.get("dataset"):
            raise SettingsError(f"{where}: needs `folders` or `dataset`")
        benchmark = as_bool(entry.get("benchmark", False), f"{where}.benchmark")
        if benchmark and not keep_benchmarks:
            continue

        def at(key: str, where: str = where, source: Path = source, entry: Any = entry) -> str:
            return where_field(source, entry, key, where)

        collections[name] = Collection(
            name=name,
            folders=string_list(entry.get("folders"), at("folders"), "folders"),
            include=string_list(entry.get("include"), at("include"), "glob patterns", default=("**/*",)),
            exclude=string_list(entry.get("exclude"), at("exclude"), "glob patterns"),
            dataset=optional_text(entry.get("dataset"), at("dataset")),
            eval_set=optional_text(entry.get("eval_set"), at("eval_set")),
            indexes=string_list(entry.get("indexes"), at("indexes"), "index config names"),
            description=text(entry.get("description"), at("description")),
            benchmark=benchmark,
            serve=read_promotion_policy(entry.get("serve"), where),
            allow_empty=as_bool(entry.get("allow_empty", False), at("allow_empty")),
            ocr=as_bool(entry.get("ocr", True), at("ocr")),
            default_index=optional_text(entry.get("default_index"), at("default_index")),
            source=where.rpartition(": collections.")[0],
        )
    return collections


def _collection_entries(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    entries = raw.get("collections")
    if not isinstance(entries, dict) or not entries:
        raise SettingsError(f"{path}: needs a non-empty mapping `collections:`")
    return entries
