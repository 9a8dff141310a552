"""Code versions from declarations: an asset's version hashes its settings and the versions its code declares.

Each step declares `CODE_VERSION` at the top of its module (`pipeline.steps.<step>`), each chunking
strategy its `code_version` in `chunking.registry`, each embedder backend its class's `code_version`
(`retrieval.embedders`, `retrieval.embedders.endpoint_backend`). Nothing is read from source files, so moving
a helper between files changes no version; a change to what a step writes is a bump, visible in review.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from chunkyard.chunking.registry import strategy_versions
from chunkyard.retrieval.embedders.embedder import backend_code_version
from chunkyard.retrieval.settings.config import IndexConfig


def code_version(kind: str, declared: str, settings: Mapping[str, Any]) -> str:
    """`kind`, its step's declared version and the settings that shape it -> a short stable version.

    Settings naming a `chunker` add the declared versions of the strategies it runs (its own and its
    base's), settings with an `embedder` the declared version of its backend: editing one strategy
    changes the versions of its own configs' assets only."""
    parts: dict[str, Any] = {"kind": kind, "declared": declared, "settings": dict(settings)}
    chunker = settings.get("chunker")
    if isinstance(chunker, Mapping):
        parts["strategies"] = strategy_versions(chunker)
    if "embedder" in settings:
        parts["embedder_backend"] = backend_code_version(settings["embedder"])
    payload = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def config_settings(config: IndexConfig, fields: tuple[str, ...]) -> dict[str, Any]:
    """The named fields of an index config (those that shape an asset; its description does not)."""
    return {name: getattr(config, name) for name in fields}
