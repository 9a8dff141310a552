"""Document-update sensor against the real database: add, modify and delete files, tick, run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from chunkyard.assets.keys import index_job_name
from dagster import AssetSelection, SensorResult, build_sensor_context, instance_for_test, materialize

from tests.dagster_helpers import DOCS, check_results, ids, materializations, unique_name, write_project


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str):
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    collection = unique_name("s")
    docs_dir, indexes_path, collections_path = write_project(tmp_path, collection, configs=["recursive-48"])
    from chunkyard.assets.definitions import build_definitions

    defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
    return collection, docs_dir, defs


def _tick(defs, instance, cursor: str | None):
    sensor = defs.resolve_sensor_def("document_update_sensor")
    # the postgres resource tears its Store down: Dagster's daemon opens and closes it around a tick
    with build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources) as context:
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
        assert request.job_name == index_job_name(collection)  # named per collection on the runs page
        assert request.tags["chunkyard/added"] == "3"
        assert request.tags["chunkyard/trigger"] == "initial_scan"
        # One run re-indexes: documents + chunks/embeddings/bm25/index; evaluation follows by automation.
        assert {k.to_user_string() for k in request.asset_selection} == {
            f"{collection}/documents",
            f"{prefix}/chunks",
            f"{prefix}/embeddings",
            f"{prefix}/bm25",
            f"{prefix}/publish",
        }
        meta, checks = _run(defs, instance, request)
        assert ids(meta[f"{prefix}/chunks"]["rechunked_documents"]) == ["alpha.md", "beta.md", "gamma.txt"]
        assert all(c.passed for c in checks.values()), {k: c.metadata for k, c in checks.items()}
        cursor = first.cursor
        assert set(json.loads(cursor)["collections"][collection]) == {"alpha.md", "beta.md", "gamma.txt"}

        # Nothing changed (a touch without a content change is not a change): no run.
        (docs_dir / "alpha.md").touch()
        idle = _tick(defs, instance, cursor)
        assert idle.run_requests == [] and idle.skip_reason is not None
        # Nor is a rewrite with other bytes but the same text (a BOM is dropped): the content hash is the text's.
        _write(docs_dir / "alpha.md", "\ufeff" + DOCS["alpha.md"])
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
            request.tags["chunkyard/changed"],
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
        # Exactly the added and changed documents are re-chunked; alpha.md (unchanged) is not.
        assert ids(chunks_meta["rechunked_documents"]) == ["beta.md", "delta.md"]
        assert ids(chunks_meta["removed_documents"]) == ["beta.md", "gamma.txt"]
        emb = meta[f"{prefix}/embeddings"]
        assert ids(emb["embedded_documents"]) == ["beta.md", "delta.md"]
        # beta.md's unchanged leading chunks come from the cache: only new text is embedded.
        assert emb["embeddings_reused"] >= 1
        assert emb["embeddings_computed"] == emb["chunks"] - emb["embeddings_reused"]
        assert emb["embeddings_computed"] < emb["chunks"]
        assert all(c.passed for c in checks.values()), {k: c.metadata for k, c in checks.items()}
        index_meta = meta[f"{prefix}/publish"]
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
        assert (tags["chunkyard/added"], tags["chunkyard/changed"], tags["chunkyard/deleted"]) == (
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


def _write(path: Path, text: str) -> None:
    """Replace a file's content atomically, so a tick never sees it half written."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def test_a_change_seen_again_gets_a_new_run_key(project) -> None:
    """A->B, B->A, A->B and delete -> re-add -> delete: every observed change is its own run key,
    and re-evaluating a tick from the same cursor keeps its key (Dagster runs it once)."""
    from chunkyard.assets.runs import RUN_HOST_TAG, this_host

    collection, docs_dir, defs = project
    beta = docs_dir / "beta.md"
    a, b = beta.read_text(), beta.read_text() + "\nA second paragraph.\n"
    with instance_for_test() as instance:
        first = _tick(defs, instance, None)
        keys = [first.run_requests[0].run_key]
        cursor = first.cursor
        generations = [json.loads(cursor)["generation"]]
        for step in ("B", "A", "B", "delete", "re-add", "delete"):
            if step in ("A", "B"):
                _write(beta, a if step == "A" else b)
            elif step == "delete":
                (docs_dir / "gamma.txt").unlink()
            else:
                _write(docs_dir / "gamma.txt", DOCS["gamma.txt"])
            result = _tick(defs, instance, cursor)
            assert len(result.run_requests) == 1, step
            request = result.run_requests[0]
            assert _tick(defs, instance, cursor).run_requests[0].run_key == request.run_key
            assert request.tags[RUN_HOST_TAG] == this_host()
            assert request.tags["chunkyard/generation"] == str(json.loads(result.cursor)["generation"])
            keys.append(request.run_key)
            generations.append(json.loads(result.cursor)["generation"])
            cursor = result.cursor
            idle = _tick(defs, instance, cursor)
            assert idle.run_requests == [] and json.loads(idle.cursor)["generation"] == generations[-1]
        assert len(set(keys)) == len(keys), keys
        assert generations == sorted(generations) and len(set(generations)) == len(generations)


def test_a_failing_file_requests_a_run_when_it_changes_and_only_then(project) -> None:
    """A file that fails to load has no content hash; its failure fingerprint still makes a change to
    it a change (the run records the failure), while an unchanged failing file requests nothing, also
    on a first tick once the store records that failure."""
    collection, docs_dir, defs = project
    broken = docs_dir / "broken.md"
    broken.write_bytes(b"\xff\xfe not UTF-8 \xff")
    with instance_for_test() as instance:
        first = _tick(defs, instance, None)
        assert first.run_requests[0].tags["chunkyard/added"] == "4"
        _run(defs, instance, first.run_requests[0])
        assert _tick(defs, instance, first.cursor).run_requests == []
        assert _tick(defs, instance, None).run_requests == []  # the store already records the failure

        broken.write_bytes(b"\xff\xfe still not UTF-8, and longer \xff")
        changed = _tick(defs, instance, first.cursor)
        (request,) = changed.run_requests
        assert (request.tags["chunkyard/added"], request.tags["chunkyard/changed"]) == ("0", "1")
        _run(defs, instance, request)
        assert _tick(defs, instance, changed.cursor).run_requests == []

        _write(broken, "# Fixed\n\nNow it reads.\n")
        fixed = _tick(defs, instance, changed.cursor)
        (request,) = fixed.run_requests
        assert request.tags["chunkyard/changed"] == "1"
        meta, _ = _run(defs, instance, request)
        assert meta[f"{collection}/documents"]["documents_added"] == 1


def test_a_cursor_of_an_earlier_version_reads_as_a_first_tick(project) -> None:
    """Earlier cursors held sha256 of the files' bytes, which no content hash equals: read as they are,
    every file would look changed. They read as no cursor: a first tick, which compares with the store."""
    import hashlib

    from chunkyard.assets.sensors import CURSOR_VERSION, parse_cursor

    collection, docs_dir, defs = project
    # a plain UTF-8 file's bytes are its text; with a BOM (or any markup) the two hashes differ
    _write(docs_dir / "gamma.txt", "\ufeff" + DOCS["gamma.txt"])
    with instance_for_test() as instance:
        first = _tick(defs, instance, None)
        _run(defs, instance, first.run_requests[0])  # indexed: the reconciler finds no gap
        current = json.loads(first.cursor)
        assert current["version"] == CURSOR_VERSION
        byte_hashes = {
            collection: {
                doc_id: hashlib.sha256((docs_dir / doc_id).read_bytes()).hexdigest()
                for doc_id in current["collections"][collection]
            }
        }
        assert byte_hashes != current["collections"]  # the two hashes differ
        bare = json.dumps(byte_hashes)  # the first format: {collection: {id: sha256 of the bytes}}
        numbered = json.dumps({"generation": 7, "collections": byte_hashes})  # the second, unversioned
        for old in (bare, numbered):
            idle = _tick(defs, instance, old)
            assert idle.run_requests == [], old  # no storm: the store has every document
            kept = json.loads(idle.cursor)
            assert kept["version"] == CURSOR_VERSION and kept["collections"] == current["collections"]
            assert parse_cursor(old) is None
        (docs_dir / "alpha.md").unlink()
        changed = _tick(defs, instance, numbered)
        (request,) = changed.run_requests
        assert request.tags["chunkyard/trigger"] == "initial_scan"
        assert (request.tags["chunkyard/changed"], request.tags["chunkyard/deleted"]) == ("0", "1")
    assert parse_cursor("not json") is None and parse_cursor("[1]") is None
    assert parse_cursor(json.dumps({"version": CURSOR_VERSION, "generation": {"a.md": "x"}})) is None


def test_a_tick_loads_only_the_files_whose_stat_signature_changed(tmp_path: Path) -> None:
    """The sensor trusts a file's stat signature as the documents step does: an unchanged file is
    not read again, a rewritten or touched one is, and its hash is the step's content hash
    (`Document.sha256`), so a touch or a rewrite with the same text changes no hash."""
    from chunkyard.chunking.documents.folder import RACY_SECONDS
    from chunkyard.chunking.types import sha256_text
    from chunkyard.pipeline.documents import hash_folder
    from chunkyard.retrieval.settings.config import load_collections

    collection = unique_name("h")
    docs_dir, _, collections_path = write_project(tmp_path, collection)
    watched = load_collections(collections_path)[collection]
    time.sleep(RACY_SECONDS + 0.1)  # a signature younger than this is never trusted
    first = hash_folder(watched)
    assert first.loaded == len(DOCS) and set(first.signatures) == set(first.hashes) == set(DOCS)
    assert first.hashes == {doc_id: sha256_text(text) for doc_id, text in DOCS.items()}
    again = hash_folder(watched, first)
    assert again.loaded == 0 and again.hashes == first.hashes and again.signatures == first.signatures

    (docs_dir / "alpha.md").write_text("Rewritten: the llama now eats oats.", encoding="utf-8")
    os.utime(docs_dir / "beta.md")  # touched, same bytes
    (docs_dir / "gamma.txt").write_bytes(b"\xef\xbb\xbf" + DOCS["gamma.txt"].encode())  # a BOM: same text
    time.sleep(RACY_SECONDS + 0.1)
    changed = hash_folder(watched, again)
    assert changed.loaded == 3
    assert changed.hashes["alpha.md"] == sha256_text("Rewritten: the llama now eats oats.")
    assert {k: v for k, v in changed.hashes.items() if k != "alpha.md"} == {
        k: v for k, v in first.hashes.items() if k != "alpha.md"
    }
    assert hash_folder(watched, changed).loaded == 0


def test_a_failing_file_has_a_fingerprint_that_changes_with_it(tmp_path: Path) -> None:
    """A file that gives no document is fingerprinted by its failure and its stat: unchanged, it is
    neither read again nor changed; rewritten (still failing, or fixed), its hash changes."""
    from chunkyard.chunking.documents.folder import RACY_SECONDS
    from chunkyard.chunking.types import sha256_text
    from chunkyard.pipeline.documents import FAILED_PREFIX, hash_folder
    from chunkyard.retrieval.settings.config import load_collections

    collection = unique_name("f")
    docs = {**DOCS, "broken.md": b"\xff\xfe not UTF-8 \xff"}
    docs_dir, _, collections_path = write_project(tmp_path, collection, docs=docs)
    watched = load_collections(collections_path)[collection]
    time.sleep(RACY_SECONDS + 0.1)
    first = hash_folder(watched)
    broken = first.hashes["broken.md"]
    assert broken.startswith(FAILED_PREFIX) and "UTF-8" in first.failures["broken.md"]
    assert "broken.md" in first.signatures  # trusted next time, as a loaded file's
    again = hash_folder(watched, first)
    assert again.loaded == 0 and again.hashes == first.hashes

    (docs_dir / "broken.md").write_bytes(b"\xff\xfe still not UTF-8, and longer \xff")
    time.sleep(RACY_SECONDS + 0.1)
    still = hash_folder(watched, again)
    assert still.loaded == 1 and still.hashes["broken.md"].startswith(FAILED_PREFIX)
    assert still.hashes["broken.md"] != broken
    assert hash_folder(watched, still).hashes == still.hashes

    (docs_dir / "broken.md").write_text("# Fixed\n\nNow it reads.\n", encoding="utf-8")
    time.sleep(RACY_SECONDS + 0.1)
    fixed = hash_folder(watched, still)
    assert fixed.hashes["broken.md"] == sha256_text("# Fixed\n\nNow it reads.\n") and not fixed.failures


def test_a_folder_that_cannot_be_read_has_a_fingerprint_too(tmp_path: Path) -> None:
    """A folder that gives no documents (missing here; unreadable goes the same way) is fingerprinted
    under its id prefix like a failing file: stable while it stays so, gone when it is back."""
    from chunkyard.pipeline.documents import FAILED_PREFIX, hash_folder
    from chunkyard.retrieval.settings.config import Collection

    docs, later = tmp_path / "docs", tmp_path / "later"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nA plain document.\n", encoding="utf-8")
    watched = Collection(name="two", folders=(str(docs), str(later)))
    first = hash_folder(watched)
    assert set(first.hashes) == {"docs/a.md", "later"} and first.hashes["later"].startswith(FAILED_PREFIX)
    assert "not found" in first.failures["later"]
    assert hash_folder(watched, first).hashes == first.hashes
    later.mkdir()
    (later / "b.md").write_text("# B\n\nBack again.\n", encoding="utf-8")
    assert set(hash_folder(watched, first).hashes) == {"docs/a.md", "later/b.md"}


def test_sensor_interval_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    from chunkyard.assets.sensors import INTERVAL_ENV, MINIMUM_INTERVAL_SECONDS, sensor_interval

    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert sensor_interval() == MINIMUM_INTERVAL_SECONDS
    monkeypatch.setenv(INTERVAL_ENV, "2")
    assert sensor_interval() == 2
    for bad in ("0", "soon"):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        with pytest.raises(ValueError, match=INTERVAL_ENV):
            sensor_interval()


def test_a_tick_sweeps_a_dead_run_and_frees_its_pool_slot(
    project, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose process is gone (its RUN_START pid no longer exists) while holding the `embedding`
    slot is failed and its slot freed by the janitor sensor's next tick: the daemon heals the pool itself.
    (The document sensor's reconciler judges the same way before it counts a run as covering a gap:
    tests/test_dead_runs.py.)"""
    import subprocess
    import sys
    import uuid

    from chunkyard.assets.runs import host_tags
    from chunkyard.orchestration.instance import ensure_instance
    from dagster import DagsterEvent, DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus

    collection, docs_dir, defs = project
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    ensure_instance(pg_url)
    instance = DagsterInstance.get()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = instance.add_run(
        DagsterRun(
            job_name="dead_job", run_id=uuid.uuid4().hex, status=DagsterRunStatus.STARTED, tags=host_tags()
        )
    )
    instance.report_dagster_event(
        DagsterEvent(DagsterEventType.RUN_START.value, job_name="dead_job", pid=gone.pid), run.run_id
    )
    storage = instance.event_log_storage
    storage.set_concurrency_slots("embedding", 1)
    assert storage.claim_concurrency_slot("embedding", run.run_id, "embeddings").is_claimed
    assert storage.get_concurrency_info("embedding").active_slot_count == 1

    janitor = defs.resolve_sensor_def("dead_run_janitor")
    result = janitor(build_sensor_context(instance=instance))
    assert isinstance(result, SensorResult) and run.run_id in result.skip_reason.skip_message
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
    assert storage.get_concurrency_info("embedding").active_slot_count == 0
    assert "no dead run" in janitor(build_sensor_context(instance=instance)).skip_reason.skip_message
