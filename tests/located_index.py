"""Shared helper for the issue-36 tests (no tests here): the located set's PDFs and decks, indexed."""

from __future__ import annotations

import uuid
from pathlib import Path

from chunkyard.chunking.documents.folder import load_folder
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs

from benchmarks.located_set import QUESTIONS, LocatedQuestion, write_located_set

_BUILT: dict[str, str] = {}  # database URL -> the index built there (one per test session)


def build_located(store, embedder, folder: Path) -> tuple[str, list[LocatedQuestion]]:
    """`recursive-256` over three PDFs and two decks (benchmarks.located_set) in a fresh collection,
    built once per database (the test modules that use it share it)."""
    if store.url in _BUILT:
        return _BUILT[store.url], list(QUESTIONS)
    questions = write_located_set(folder)
    documents, failures = load_folder(folder)
    assert failures == []
    spec = IndexSpec(f"located{uuid.uuid4().hex[:8]}", load_index_configs()["recursive-256"])
    store.documents.sync(spec.collection, documents, [])
    build_index(store, spec, embedder)
    _BUILT[store.url] = str(spec.name)
    return str(spec.name), questions
