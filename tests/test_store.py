"""Store: versioned migrations, document sync, embedding cache, evaluations (real Postgres)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from chunkyard.chunking.documents.folder import DocumentFailure
from chunkyard.chunking.types import Document
from chunkyard.evaluation.estimates import Estimate
from chunkyard.evaluation.metrics import MetricSummary
from chunkyard.evaluation.runner import EvaluationReport
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.indexes import partition_names, split_index_name
from chunkyard.retrieval.store.migrations import MIGRATIONS

from tests.test_indexing_support import make_spec


def test_migrations_are_versioned_and_idempotent(store: Store) -> None:
    assert store.migrate() == []  # already applied
    assert store.schema_version() == max(v for v, _, _ in MIGRATIONS)
    with store.connection() as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [v for v, _, _ in MIGRATIONS]


def test_chunk_vectors_are_stored_inside_their_rows(store: Store) -> None:
    """STORAGE MAIN: a vector is never moved to the TOAST table before the texts (migration 7)."""
    spec = make_spec()
    store.indexes.ensure(spec)
    with store.connection() as conn:
        storage = conn.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
            (partition_names(spec.name)["chunks"],),
        ).fetchone()[0]
    assert storage == "m"


def test_sync_documents_reports_added_changed_deleted_unchanged(store: Store) -> None:
    collection = "sync-test"
    first = store.documents.sync(collection, [Document("a", "alpha"), Document("b", "beta")], [])
    assert (first.added, first.changed, first.deleted, first.unchanged) == (["a", "b"], [], [], [])
    second = store.documents.sync(
        collection, [Document("a", "alpha"), Document("c", "gamma", title="C", metadata={"k": 1})], []
    )
    assert (second.added, second.changed, second.deleted, second.unchanged) == (["c"], [], ["b"], ["a"])
    third = store.documents.sync(collection, [Document("a", "alpha 2")], [DocumentFailure("c", "not UTF-8")])
    assert third.changed == ["a"] and third.deleted == [] and len(third.failed) == 1  # c failed: kept
    docs = {d.id: d for d in store.documents.read(collection)}
    assert docs["a"].text == "alpha 2" and docs["c"].title == "C" and docs["c"].metadata == {"k": 1}
    assert store.documents.failures(collection) == [{"path": "c", "reason": "not UTF-8"}]
    assert [d.id for d in store.documents.read(collection, ["c"])] == ["c"]


def test_a_failed_folder_keeps_its_documents(store: Store) -> None:
    collection = "sync-folder"
    store.documents.sync(collection, [Document("guide/a.md", "a"), Document("b.md", "b")], [])
    report = store.documents.sync(collection, [], [DocumentFailure("guide", "permission denied")])
    assert report.deleted == ["b.md"]
    assert [d.id for d in store.documents.read(collection)] == ["guide/a.md"]


def test_duplicate_document_ids_are_rejected(store: Store) -> None:
    with pytest.raises(ValueError, match="duplicate document id"):
        store.documents.sync("dupes", [Document("a", "x"), Document("a", "y")], [])


def test_embedding_cache_round_trip(store: Store) -> None:
    rng = np.random.default_rng(0)
    vectors = {f"h{i}": rng.standard_normal(8).astype(np.float32) for i in range(5)}
    assert store.embedding_cache.add("model-x", vectors) == 5
    assert store.embedding_cache.add("model-x", vectors) == 0  # already there
    found = store.embedding_cache.lookup("model-x", ["h0", "h3", "missing"])
    assert set(found) == {"h0", "h3"}
    np.testing.assert_array_equal(found["h3"], vectors["h3"])
    assert store.embedding_cache.lookup("model-y", ["h0"]) == {}  # keyed by model


def _report(index_name: str, hit: float) -> EvaluationReport:
    summary = MetricSummary({}, {}, {"hit_at_5": Estimate(hit, hit, hit, 1)}, n_questions=1)
    return EvaluationReport(index_name, "registered", "demo", 5, ["dense"], 1, {"dense": summary})


def test_index_registration_partitions_and_evaluations(store: Store) -> None:
    spec = make_spec(name="registered")
    info = store.indexes.ensure(spec)
    assert info["version"] == 0 and info["config_hash"] == spec.config.config_hash
    parts = partition_names(spec.name)
    with store.connection() as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {parts["chunks"], parts["postings"]} <= tables
    assert store.indexes.ensure(spec)["name"] == spec.name  # idempotent
    assert spec.name in [i["name"] for i in store.indexes.list()]
    store.evaluations.record(spec.name, _report(spec.name, 0.5))
    store.evaluations.record(spec.name, _report(spec.name, 0.75))
    latest = store.evaluations.latest(spec.name)
    assert latest == _report(spec.name, 0.75).as_dict()
    record = store.indexes.info(spec.name)["latest_evaluation"]
    assert record["report"] == latest and record["index_version"] == 0 and record["dataset"] == "demo"
    store.indexes.drop(spec.name)
    assert store.indexes.info(spec.name) is None


def test_index_names() -> None:
    assert split_index_name("recursive-256") == "demo/recursive-256"
    assert split_index_name("chroma_general/token-256") == "chroma_general/token-256"
    with pytest.raises(ValueError, match="index"):
        split_index_name("")


def test_embedded_server_takes_the_shared_buffers_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHUNKYARD_PG_SHARED_BUFFERS restarts the embedded server once with that size; nonsense is refused."""
    import psycopg
    from chunkyard.retrieval.store.db import embedded_database_url

    monkeypatch.setenv("CHUNKYARD_PG_SHARED_BUFFERS", "256MB")
    url = embedded_database_url(tmp_path / "pg-buffers")
    with psycopg.connect(url) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone()[0] == "256MB"

    monkeypatch.setenv("CHUNKYARD_PG_SHARED_BUFFERS", "lots")
    with pytest.raises(ValueError, match="CHUNKYARD_PG_SHARED_BUFFERS"):
        embedded_database_url(tmp_path / "pg-buffers-bad")


def test_embedded_server_takes_the_wal_level_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHUNKYARD_PG_WAL_LEVEL=minimal restarts the embedded server once with it (and no WAL senders),
    together with the shared_buffers asked for; a level Postgres has not is refused."""
    import psycopg
    from chunkyard.retrieval.store.db import embedded_database_url

    monkeypatch.setenv("CHUNKYARD_PG_WAL_LEVEL", "minimal")
    monkeypatch.setenv("CHUNKYARD_PG_SHARED_BUFFERS", "160MB")
    url = embedded_database_url(tmp_path / "pg-wal")
    with psycopg.connect(url) as conn:
        shown = [conn.execute(f"SHOW {name}").fetchone()[0] for name in ("wal_level", "max_wal_senders")]
        assert shown == ["minimal", "0"]
        assert conn.execute("SHOW shared_buffers").fetchone()[0] == "160MB"

    monkeypatch.setenv("CHUNKYARD_PG_WAL_LEVEL", "archive")
    with pytest.raises(ValueError, match="CHUNKYARD_PG_WAL_LEVEL"):
        embedded_database_url(tmp_path / "pg-wal-bad")
