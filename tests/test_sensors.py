"""Document-update sensor against the real database: add, modify and delete files, tick, run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import AssetSelection, SensorResult, build_sensor_context, instance_for_test, materialize

from tests.dagster_helpers import check_results, ids, materializations, unique_name, write_project


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str):
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    collection = unique_name("s")
    docs_dir, indexes_path, collections_path = write_project(tmp_path, collection, configs=["recursive-48"])
    from orchestration.definitions import build_definitions

    defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
    return collection, docs_dir, defs


def _tick(defs, instance, cursor: str | None):
    sensor = defs.resolve_sensor_def("document_update_sensor")
    context = build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources)
    result = sensor(context)
    assert isinstance(result, SensorResult)
    return result


def _run(defs, instance, request):
    assets = list(defs.assets)
    result = materialize(
        assets,
        instance=instance,
        resources=defs.resources,
        selection=AssetSelection.assets(*request.asset_selection),
        tags=request.tags,
        run_config={k: v for k, v in request.run_config.items() if k != "execution"},
    )
    assert result.success
    return materializations(result), check_results(result)


def test_sensor_reindexes_exactly_what_changed(project) -> None:
    collection, docs_dir, defs = project
    prefix = f"{collection}/recursive_48"
    with instance_for_test() as instance:
        first = _tick(defs, instance, None)
        assert len(first.run_requests) == 1
        request = first.run_requests[0]
        assert request.tags["chunkyard/added"] == "3"
        assert request.tags["chunkyard/trigger"] == "initial_scan"
        # One run re-indexes: documents + chunks/embeddings/bm25/index; evaluation follows by automation.
        assert {k.to_user_string() for k in request.asset_selection} == {
            f"{collection}/documents",
            f"{prefix}/chunks",
            f"{prefix}/embeddings",
            f"{prefix}/bm25",
            f"{prefix}/index",
        }
        meta, checks = _run(defs, instance, request)
        assert ids(meta[f"{prefix}/chunks"]["rechunked_documents"]) == ["alpha.md", "beta.md", "gamma.txt"]
        assert all(c.passed for c in checks.values()), {k: c.metadata for k, c in checks.items()}
        cursor = first.cursor
        assert set(json.loads(cursor)[collection]) == {"alpha.md", "beta.md", "gamma.txt"}

        # Nothing changed (a touch without a content change is not a change): no run.
        (docs_dir / "alpha.md").touch()
        idle = _tick(defs, instance, cursor)
        assert idle.run_requests == [] and idle.skip_reason is not None

        # Add one file, modify one (append a paragraph), delete one.
        (docs_dir / "delta.md").write_text("# Delta\n\nA new document about rerankers and cross-encoders.\n")
        beta = docs_dir / "beta.md"
        beta.write_text(beta.read_text() + "\nAn appended paragraph about incremental indexing.\n")
        (docs_dir / "gamma.txt").unlink()
        changed = _tick(defs, instance, cursor)
        assert len(changed.run_requests) == 1
        request = changed.run_requests[0]
        assert request.tags["chunkyard/trigger"] == "document_update"
        # A small change set runs its steps in one process (no per-step process start-up).
        assert request.run_config == {"execution": {"config": {"in_process": {}}}}
        assert (
            request.tags["chunkyard/added"],
            request.tags["chunkyard/modified"],
            request.tags["chunkyard/deleted"],
        ) == ("1", "1", "1")
        # The same change set seen again yields the same run key (Dagster dedupes it).
        again = _tick(defs, instance, cursor)
        assert again.run_requests[0].run_key == request.run_key
        assert request.run_key != first.run_requests[0].run_key

        meta, checks = _run(defs, instance, request)
        docs_meta = meta[f"{collection}/documents"]
        assert (
            docs_meta["documents_added"],
            docs_meta["documents_changed"],
            docs_meta["documents_deleted"],
            docs_meta["documents_unchanged"],
        ) == (1, 1, 1, 1)
        chunks_meta = meta[f"{prefix}/chunks"]
        # Exactly the added and modified documents are re-chunked; alpha.md (unchanged) is not.
        assert ids(chunks_meta["rechunked_documents"]) == ["beta.md", "delta.md"]
        assert ids(chunks_meta["removed_documents"]) == ["beta.md", "gamma.txt"]
        emb = meta[f"{prefix}/embeddings"]
        assert ids(emb["embedded_documents"]) == ["beta.md", "delta.md"]
        # beta.md's unchanged leading chunks come from the cache: only new text is embedded.
        assert emb["embeddings_reused"] >= 1
        assert emb["embeddings_computed"] == emb["chunks"] - emb["embeddings_reused"]
        assert emb["embeddings_computed"] < emb["chunks"]
        assert all(c.passed for c in checks.values()), {k: c.metadata for k, c in checks.items()}
        index_meta = meta[f"{prefix}/index"]
        assert index_meta["documents_total"] == 3

        # Another tick after the run: nothing left to do.
        assert _tick(defs, instance, changed.cursor).run_requests == []
        # A sensor starting without a cursor (a new deployment, `chunkyard ui` after `chunkyard demo`)
        # finds the folders equal to the database: no run.
        fresh = _tick(defs, instance, None)
        assert fresh.run_requests == [] and fresh.skip_reason is not None
        # ... but a file changed while no sensor was watching is noticed.
        (docs_dir / "alpha.md").write_text("# Alpha\n\nRewritten while nobody watched.\n")
        (docs_dir / "delta.md").unlink()
        fresh = _tick(defs, instance, None)
        assert len(fresh.run_requests) == 1
        tags = fresh.run_requests[0].tags
        assert (tags["chunkyard/added"], tags["chunkyard/modified"], tags["chunkyard/deleted"]) == (
            "0",
            "1",
            "1",
        )


def test_unchanged_rerun_recomputes_no_embedding(project) -> None:
    collection, docs_dir, defs = project
    prefix = f"{collection}/recursive_48"
    with instance_for_test() as instance:
        request = _tick(defs, instance, None).run_requests[0]
        _run(defs, instance, request)
        meta, _ = _run(defs, instance, request)  # the same selection again: everything unchanged
        assert meta[f"{prefix}/chunks"]["chunks_staged"] == 0
        assert meta[f"{prefix}/embeddings"]["embeddings_computed"] == 0
        assert ids(meta[f"{prefix}/embeddings"]["embedded_documents"]) == []
