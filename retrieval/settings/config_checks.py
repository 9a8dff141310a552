"""Every field of a project's settings files checked before anything runs (`chunkyard check`, `chunkyard
index`, the Dagster definitions), so a typo stops the command at once instead of a step half a minute in.

The loaders (`retrieval.settings.config`) check each entry's shape; this adds what needs more than the entry:
each chunker built as the chunks step builds it, the embedder options and model, the hybrid
settings with the search options' own wording, the folders and evaluation sets on disk. Every
problem names `file:line`, the field and what is allowed; all of them are reported at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkyard.retrieval.settings.config import (
    Collection,
    IndexConfig,
    IndexSpec,
    load_collections,
    load_index_configs,
    with_coarse_companions,
)
from chunkyard.retrieval.settings.inherited_model import for_collection
from chunkyard.retrieval.settings.project import SettingsError, project_root, read_yaml


class SettingsErrors(SettingsError):
    """Several settings problems, one line each (`problems`)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _NoModel:
    """Stands in for the embedding model when a chunker that embeds is built only to check its fields."""


@dataclass(frozen=True)
class PlannedCollection:
    """What `chunkyard index` would build for one collection."""

    collection: Collection
    configs: tuple[IndexConfig, ...]
    folders: tuple[Path, ...]


class _Lines:
    """`file:line` of a field, found by reading the entry's file again (its mappings keep key lines)."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, Any] | None] = {}

    def of(self, source: str, path: Iterable[str]) -> str:
        """The deepest of `path`'s keys (`indexes`, NAME, `chunker`, `size`) that has a line."""
        file, _, line = source.rpartition(":")
        if not line.isdigit():
            file, line = source, ""
        if file not in self._files:
            try:
                self._files[file] = read_yaml(Path(file))
            except (SettingsError, OSError):
                self._files[file] = None
        found = f"{file}:{line}" if line else file
        node: Any = self._files[file]
        for key in path:
            lines = getattr(node, "lines", {})
            if not isinstance(node, dict) or key not in node:
                break
            if key in lines:
                found = f"{file}:{lines[key]}"
            node = node[key]
        return found


def _field_path(message: str) -> list[str]:
    """`['chunker', 'size']` of a library error such as `chunker.size: must be >= 8, got -5`."""
    head = message.split(":", 1)[0]
    return [part for part in head.split(".") if part] if " " not in head else []


def index_config_problems(
    config: IndexConfig, lines: _Lines | None = None, *, built: bool = True
) -> list[str]:
    """The problems of one index config: its chunker, embedder and hybrid settings, and (when it is
    to be `built`) whether its embedding model is on this machine."""
    from chunkyard.chunking.base import ChunkerConfigError
    from chunkyard.chunking.models import resolve_model_path
    from chunkyard.chunking.registry import build_chunker, needs_embedding_model
    from chunkyard.retrieval.embedders.base import EmbedderConfigError
    from chunkyard.retrieval.embedders.embedder import check_options
    from chunkyard.retrieval.embedders.endpoint_settings import ENDPOINT_BACKEND
    from chunkyard.retrieval.settings.option_schema import SearchError
    from chunkyard.retrieval.settings.options import option_schemas

    lines = lines or _Lines()
    problems: list[str] = []

    def add(message: str, path: list[str]) -> None:
        where = lines.of(config.source, ["indexes", config.name, *path]) if config.source else "indexes"
        problems.append(f"{where}: indexes.{config.name}.{message}")

    try:
        model = _NoModel() if needs_embedding_model(config.chunker) else None
        build_chunker(dict(config.chunker), config_key=config.config_hash, embedding_model=model)
    except ChunkerConfigError as exc:
        add(str(exc), _field_path(str(exc)))
    try:
        check_options(dict(config.embedder))
    except EmbedderConfigError as exc:
        add(str(exc), _field_path(str(exc)))
    try:
        if built and (config.embedder or {}).get("backend") != ENDPOINT_BACKEND:  # a server's is its own
            resolve_model_path(config.embedding_model)
    except ValueError as exc:
        add(f"embedding_model: {exc}", ["embedding_model"])
    oversized = _oversized(config) if built and not problems else None
    if oversized:
        add(oversized, ["chunker", "size"])
    schemas = {schema.name: schema for schema in option_schemas()}
    for key, value in (config.hybrid or {}).items():
        try:
            schemas[key].check(value)
        except SearchError as exc:
            add(f"hybrid.{exc}", ["hybrid", key])
    return problems


# Units whose count is never below the model's own token count for the same text: a chunk of more of
# them than the model reads is sure to be cut (cl100k and chars can go either way, so the run checks them).
_AT_LEAST_MODEL_TOKENS = ("model", "words")


def _oversized(config: IndexConfig) -> str | None:
    """`chunker.size` beyond the model's input limit, known before any chunk is made (the chunks step
    would fail its token-limit check after the run had started), unless `allow_truncation` says so."""
    from chunkyard.chunking.models import model_token_limit
    from chunkyard.retrieval.embedders.endpoint_settings import ENDPOINT_BACKEND

    chunker = dict(config.chunker)
    size, unit = chunker.get("size", 256), chunker.get("tokenizer", "model")
    if config.allow_truncation or unit not in _AT_LEAST_MODEL_TOKENS or not isinstance(size, int):
        return None
    if (config.embedder or {}).get("backend") == ENDPOINT_BACKEND:
        return None  # the server's model and its limit are the server's own
    try:
        limit = model_token_limit(config.embedding_model)
    except (OSError, ValueError):
        return None  # a model that is not there is reported by itself
    if size <= limit:
        return None
    return (
        f"chunker.size: {size} {unit} tokens is more than {config.embedding_model} reads ({limit} of its "
        f"tokens): every longer chunk would be cut when embedded; use size <= {limit}, or "
        "`allow_truncation: true` to embed only each chunk's start"
    )


def collection_problems(collection: Collection, configs: dict[str, IndexConfig]) -> list[str]:
    """The problems of one collection: its index configs named, its folders and evaluation set there."""
    problems: list[str] = []
    where = f"{collection.source or 'collections'}: collections.{collection.name}"
    lines = _Lines()

    def at(key: str) -> str:
        located = lines.of(collection.source, ["collections", collection.name, key])
        return f"{located}: collections.{collection.name}.{key}"

    if not collection.indexes:
        problems.append(f"{where}.indexes: lists no index config; known: {', '.join(sorted(configs))}")
    problems += _unknown_configs(collection, configs, lines)
    if collection.default_index and collection.default_index not in collection.indexes:
        problems.append(
            f"{at('default_index')}: {collection.default_index!r} is not one of its indexes "
            f"({', '.join(collection.indexes)})"
        )
    for folder in collection.folder_paths():
        if folder.is_dir() or (collection.allow_empty and not folder.exists()):
            continue
        state = "is not a folder" if folder.exists() else "does not exist"
        problems.append(
            f"{at('folders')}: {folder} {state}"
            + ("" if folder.exists() else " (`allow_empty: true` on the collection indexes it as empty)")
        )
    if collection.eval_set:
        path = Path(collection.eval_set)
        path = path if path.is_absolute() else project_root() / path
        if not path.is_file():
            problems.append(
                f"{at('eval_set')}: {path} does not exist (a JSON Lines or YAML file of questions)"
            )
    return problems


def _unknown_configs(collection: Collection, configs: dict[str, IndexConfig], lines: _Lines) -> list[str]:
    """The index configs a collection lists that no settings file declares."""
    where = lines.of(collection.source, ["collections", collection.name, "indexes"])
    return [
        f"{where}: collections.{collection.name}.indexes: unknown index config {name!r}; "
        f"known: {', '.join(sorted(configs))}"
        for name in collection.indexes
        if name not in configs
    ]


def check_project(names: list[str] | None = None) -> list[PlannedCollection]:
    """Check every index config and the collections `names` (default: all); what would be built, or
    SettingsErrors listing every problem."""
    return list(check_index_run(names, every_collection=False).planned)


@dataclass(frozen=True)
class CheckedProject:
    """The settings files read once and checked: what `chunkyard index` plans for the collections it
    names, and every index spec its Dagster definitions build (all collections', coarse companions too)."""

    collections: dict[str, Collection]
    planned: tuple[PlannedCollection, ...]
    specs: tuple[IndexSpec, ...]

    @property
    def chosen(self) -> list[str]:
        """The names of the collections the command named."""
        return [plan.collection.name for plan in self.planned]


def check_index_run(names: list[str] | None = None, *, every_collection: bool = True) -> CheckedProject:
    """Each settings file read once and every problem found at once (SettingsErrors): the collections
    `names` (default: all) with their folders, every index config's fields, and the models of the
    configs to build. `every_collection`: what the definitions need of the other collections too (their
    index configs known, their models here), so the definitions are built from this without a second check."""
    configs = load_index_configs()
    collections = load_collections()
    lines = _Lines()
    planned, problems = [], []
    for name in names or sorted(collections):
        collection = collections[name]
        problems += collection_problems(collection, configs)
        used = [name for name in with_coarse_companions(list(collection.indexes), configs) if name in configs]
        built_here = tuple(for_collection(configs[name], collection, configs) for name in used)
        planned.append(PlannedCollection(collection, built_here, tuple(collection.folder_paths())))
    specs = _index_specs(collections, configs)
    to_build = [config for plan in planned for config in plan.configs]
    if every_collection:
        chosen = {plan.collection.name for plan in planned}
        for collection in collections.values():
            if collection.name not in chosen:
                problems += _unknown_configs(collection, configs, lines)
        to_build += [spec.config for spec in specs]
    built = {config.name for config in to_build}
    inherited = [config for config in to_build if config not in configs.values()]
    # every config's fields; the models only of those to build (another may name one not installed here),
    # and again with each model a collection's config inherits (its input limit may differ)
    problems = list(
        dict.fromkeys(
            [
                problem
                for config in [*configs.values(), *inherited]
                for problem in index_config_problems(config, lines, built=config.name in built)
            ]
            + problems
        )
    )
    if problems:
        raise SettingsErrors(problems)
    return CheckedProject(collections, tuple(planned), tuple(specs))


def _index_specs(collections: dict[str, Collection], configs: dict[str, IndexConfig]) -> list[IndexSpec]:
    """Every (collection, index config) pair of configs known; a config with `coarse` needs its coarse
    index in the same collection, so that one is built too."""
    return [
        IndexSpec(collection.name, for_collection(configs[name], collection, configs))
        for collection in collections.values()
        for name in with_coarse_companions(list(collection.indexes), configs)
        if name in configs
    ]


def load_index_specs(
    indexes_path: str | Path | None = None, collections_path: str | Path | None = None
) -> list[IndexSpec]:
    """Every (collection, index config) pair the settings files declare, validated against each other."""
    configs = load_index_configs(indexes_path)
    collections = load_collections(collections_path)
    for collection in collections.values():
        for config_name in collection.indexes:
            if config_name not in configs:
                raise SettingsError(
                    f"{collection.source or 'collections'}: collections.{collection.name}.indexes: "
                    f"unknown index config {config_name!r}; "
                    f"known: {sorted(configs)}"
                )
    specs = _index_specs(collections, configs)
    # each config as the collections build it (an inherited model has its own input limit)
    built = {(spec.config.name, spec.config.embedding_model): spec.config for spec in specs}
    problems = list(dict.fromkeys(p for config in built.values() for p in index_config_problems(config)))
    if problems:  # each chunker, embedder and model as the steps will build them, before any step runs
        raise SettingsErrors(problems)
    return specs
