"""`chunkyard check` and `chunkyard index --dry-run`: every config checked, and what `index` would build.

`chunkyard index` runs the same check first and refuses to start on any problem (exit 2), so a
typo in chunkyard.yaml is reported with its `file:line` before a run, not half a minute into one.
"""

from __future__ import annotations

import argparse
from typing import Any

from chunkyard.retrieval.settings.config_checks import PlannedCollection, check_project

DESCRIPTION = (
    "Check every field of chunkyard.yaml and the index configs (each problem with file:line and the "
    "allowed values), then show what `chunkyard index` would build. Exit 2 on any problem."
)


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check",
        help="check the configuration and show what `chunkyard index` would build",
        description=DESCRIPTION,
        parents=parents,
    )
    check.add_argument("name", nargs="?", help="one collection of chunkyard.yaml (default: all of them)")


def chosen_collections(name: str | None) -> list[str]:
    """The collections a command names (default: all of the project's); UsageError for an unknown one."""
    from chunkyard.orchestration.cli_errors import UsageError
    from chunkyard.retrieval.settings.config import load_collections
    from chunkyard.retrieval.settings.project import PROJECT_FILE, project_root

    collections = load_collections()
    if not collections:
        raise UsageError(
            f"{project_root() / PROJECT_FILE} has no collections: add one with `chunkyard add NAME FOLDER`"
        )
    if name is not None and name not in collections:
        raise UsageError(
            f"collection {name!r} is not in {project_root() / PROJECT_FILE}; known: "
            f"{', '.join(sorted(collections))} (benchmark collections need --with-benchmarks)"
        )
    return [name] if name else sorted(collections)


def cmd_check(args: argparse.Namespace) -> int:
    planned = check_project(chosen_collections(getattr(args, "name", None)))
    print_plan(planned)
    for warning in language_warnings(planned):
        print(f"warning: {warning}", flush=True)
    return 0


def language_warnings(planned: list[PlannedCollection]) -> list[str]:
    """An English-only model on a folder that is not English: a warning, not an error (it runs, and
    ranks poorly); each collection's folders are read to measure their languages."""
    from chunkyard.orchestration.model_choice import folder_languages, language_warning
    from chunkyard.retrieval.embedders.endpoint_settings import ENDPOINT_BACKEND

    warnings = []
    for plan in planned:
        collection = plan.collection
        if collection.dataset or not plan.folders:
            continue
        shares = folder_languages(list(plan.folders), list(collection.include), list(collection.exclude))
        for config in plan.configs:
            if (config.embedder or {}).get("backend") == ENDPOINT_BACKEND:
                continue  # a server's model: its languages are the server's own
            found = language_warning(collection.name, config.name, config.embedding_model, shares)
            if found:
                warnings.append(found)
    return warnings


def print_plan(planned: list[PlannedCollection]) -> None:
    """The collections, their folders and evaluation sets, and the index configs each would build."""
    from chunkyard.retrieval.settings.project import PROJECT_FILE, project_root

    print(f"Configuration OK ({project_root() / PROJECT_FILE}). `chunkyard index` would build:", flush=True)
    for plan in planned:
        collection = plan.collection
        source = (
            f"dataset {collection.dataset}"
            if collection.dataset
            else ", ".join(
                str(folder) + ("" if folder.is_dir() else " (missing: indexed as empty)")
                for folder in plan.folders
            )
        )
        print(f"  {collection.name}: {source}")
        if collection.eval_set:
            print(f"    evaluated on {collection.eval_set}")
        for config in plan.configs:
            print(f"    {collection.name}/{config.name}: {describe(config)}")


def describe(config: Any) -> str:
    """One line of what an index config does: chunker, its size and unit, the embedder (and where its
    model comes from when the collection chose it)."""
    from chunkyard.retrieval.settings.inherited_model import inherited_note

    chunker = dict(config.chunker)
    strategy = chunker.pop("strategy")
    size = chunker.pop("size", 256)
    tokenizer = chunker.pop("tokenizer", "model")
    overlap = chunker.pop("overlap", 0)
    rest = "".join(f", {key} {value}" for key, value in sorted(chunker.items()))
    embedder = dict(config.embedder)
    backend = embedder.get("backend", "torch") + (
        f" {embedder['quantize']}" if embedder.get("quantize") else ""
    )
    return (
        f"{strategy} chunks of up to {size} {tokenizer} tokens, overlap {overlap}{rest}; "
        f"embedded by {config.embedding_model} ({backend}){inherited_note(config)}"
    )
