"""Asset names and code versions.

A code version is a hash of the settings that shape an asset's content plus the source of the
code that builds it, so editing one index config marks exactly that config's assets stale in
the Dagster UI, and editing, say, the chunkers marks every chunk set stale.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

# Which source files build each kind of asset (globs relative to the repository root). Files that
# do not exist (yet) are skipped, so the hash simply covers the code that is there.
SOURCES: dict[str, tuple[str, ...]] = {
    "documents": ("chunking/loaders.py", "chunking/types.py", "retrieval/store.py", "assets/factory.py"),
    "chunks": ("chunking/**/*.py", "retrieval/indexing.py", "retrieval/store.py", "assets/factory.py"),
    "embeddings": (
        "retrieval/embedder.py",
        "retrieval/indexing.py",
        "retrieval/store.py",
        "assets/factory.py",
    ),
    "bm25": ("retrieval/bm25.py", "retrieval/analyzer.py", "retrieval/indexing.py", "assets/factory.py"),
    "index": ("retrieval/indexing.py", "retrieval/store.py", "assets/factory.py", "assets/checks.py"),
    "evaluation": (
        "evaluation/**/*.py",
        "retrieval/search.py",
        "retrieval/context.py",
        "retrieval/hybrid.py",
        "assets/factory.py",
    ),
    "leaderboard": ("evaluation/reports.py", "assets/factory.py"),
}


def safe_name(name: str) -> str:
    """A Dagster-legal name part: `recursive-256` -> `recursive_256`."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if not cleaned[:1].isdigit() else f"_{cleaned}"


@functools.cache
def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digest(patterns: Iterable[str], root: Path = REPO_ROOT) -> str:
    """Hash of the named source files (content and relative path), in a stable order."""
    digest = hashlib.sha256()
    files: set[Path] = set()
    for pattern in patterns:
        files.update(p for p in root.glob(pattern) if p.is_file())
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(_file_digest(path).encode())
    return digest.hexdigest()


def code_version(kind: str, settings: Any) -> str:
    """`kind` (documents, chunks, ...) + the settings that shape it -> a short stable version."""
    payload = json.dumps({"kind": kind, "settings": settings}, sort_keys=True, default=str)
    digest = hashlib.sha256(payload.encode())
    digest.update(source_digest(SOURCES[kind]).encode())
    return digest.hexdigest()[:16]


def index_settings(config: Any, kind: str) -> dict[str, Any]:
    """The parts of an `IndexConfig` that shape an asset of `kind` (the description does not)."""
    chunk = {"chunker": config.chunker, "embedding_model": config.embedding_model}
    if kind == "chunks":
        return chunk
    if kind == "embeddings":
        return {**chunk, "embedder": config.embedder}
    if kind == "bm25":
        return {**chunk, "bm25": config.bm25}
    if kind == "index":
        return {**chunk, "embedder": config.embedder, "bm25": config.bm25}
    if kind == "evaluation":
        return {
            **chunk,
            "embedder": config.embedder,
            "bm25": config.bm25,
            "hybrid": config.hybrid,
            "rerank": config.rerank,
            "context_scoring": config.context_scoring,
            "collapse_duplicates": config.collapse_duplicates,
            "coarse": config.coarse,
        }
    raise ValueError(f"unknown index asset kind {kind!r}")
