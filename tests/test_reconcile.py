"""Convergence after a fault: a run killed with SIGKILL mid-run, then NO new edit, and the change is
searchable anyway (the sensor's reconciler sees the gap between folder, documents and index)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest
from chunkyard.pipeline.reconcile import Attempt, GapBackoff, decide
from chunkyard.retrieval.indexing.lag import index_lag
from chunkyard.retrieval.store import Store
from dagster import (
    AssetSelection,
    DagsterInstance,
    DagsterRunStatus,
    SensorResult,
    build_sensor_context,
    materialize,
)

from tests.conftest import REPO_ROOT
from tests.dagster_helpers import unique_name, write_project

RUN_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from dagster import AssetKey, AssetSelection, DagsterInstance, materialize
    from chunkyard.assets.definitions import build_definitions

    spec = json.loads(open(sys.argv[1]).read())
    defs = build_definitions(spec["indexes"], spec["collections"], database_url=spec["url"])
    keys = [AssetKey.from_user_string(k) for k in spec["selection"]]
    materialize(list(defs.assets), instance=DagsterInstance.get(), resources=defs.resources,
                selection=AssetSelection.assets(*keys), tags=spec["tags"])
    """
)
WORD = "quixoticmarmalade"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str):
    from chunkyard.orchestration.instance import ensure_instance

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("CHUNKYARD_RECONCILE_BACKOFF", "0")
    ensure_instance(pg_url)
    collection = unique_name("r")
    docs_dir, indexes_path, collections_path = write_project(tmp_path, collection, configs=["recursive-48"])
    from chunkyard.assets.definitions import build_definitions

    defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
    return collection, docs_dir, indexes_path, collections_path, defs


def _tick(defs, instance, cursor: str | None) -> SensorResult:
    sensor = defs.resolve_sensor_def("document_update_sensor")
    with build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources) as context:
        result = sensor(context)
    assert isinstance(result, SensorResult)
    return result


def _sweep(defs, instance) -> None:
    with build_sensor_context(instance=instance) as context:
        defs.resolve_sensor_def("dead_run_janitor")(context)


def _tags(request) -> dict[str, str]:
    return {**request.tags, "dagster/run_key": request.run_key}


def _run(defs, instance, request) -> bool:
    return materialize(
        list(defs.assets),
        instance=instance,
        resources=defs.resources,
        selection=AssetSelection.assets(*request.asset_selection),
        tags=_tags(request),
        raise_on_error=False,
    ).success


def _searchable(pg_url: str, index: str, word: str) -> bool:
    from chunkyard.retrieval.query.searcher import Searcher
    from chunkyard.retrieval.store import Store

    store = Store(pg_url)
    try:
        hits = Searcher(store, None).search(word, index, mode="bm25", k=3)
    finally:
        store.close()
    return any(word in hit.text for hit in hits)


@pytest.mark.parametrize("blocked_in", ["documents", "chunks"])
def test_a_run_killed_mid_run_is_reconciled_with_no_new_edit(
    project, pg_url: str, tmp_path: Path, blocked_in
) -> None:
    """The run is held inside one step by a lock this test takes, killed with SIGKILL, and the lock let
    go: before the documents step (the documents table never saw the edit) or after it (the table holds
    the new hash, the index the old). Only sensor ticks follow, no edit: the change gets searchable."""
    collection, docs_dir, indexes_path, collections_path, defs = project
    index = f"{collection}/recursive-48"
    instance = DagsterInstance.get()
    first = _tick(defs, instance, None)
    assert _run(defs, instance, first.run_requests[0])
    cursor = _tick(defs, instance, first.cursor).cursor  # idle: the index serves the folder
    assert not _searchable(pg_url, index, WORD)

    beta = docs_dir / "beta.md"
    beta.write_text(beta.read_text() + f"\nAn appended sentence about {WORD}.\n")
    changed = _tick(defs, instance, cursor)
    (request,) = changed.run_requests
    spec = tmp_path / "run.json"
    spec.write_text(
        json.dumps(
            {
                "indexes": str(indexes_path),
                "collections": str(collections_path),
                "url": pg_url,
                "selection": [k.to_user_string() for k in request.asset_selection],
                "tags": _tags(request),
            }
        )
    )
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CHUNKYARD_CONFIGS": str(tmp_path)}
    with psycopg.connect(pg_url) as lock:
        if blocked_in == "documents":  # sync_documents waits for this collection's advisory lock
            lock.execute(
                "SELECT pg_advisory_xact_lock(hashtext('chunkyard.documents:' || %s))", (collection,)
            )
        else:  # stage_chunks waits for the index row
            lock.execute("SELECT 1 FROM indexes WHERE name = %s FOR UPDATE", (index,))
        worker = subprocess.Popen([sys.executable, str(script), str(spec)], env=env, cwd=REPO_ROOT)
        try:
            _wait_blocked(lock, worker, blocked_in)
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
        lock.rollback()
    stored = {
        r.run_id: r.status for r in instance.get_runs() if r.tags.get("dagster/run_key") == request.run_key
    }
    assert list(stored.values()) == [DagsterRunStatus.STARTED]  # dead, but nobody knows yet
    assert not _searchable(pg_url, index, WORD)
    # the lag shows it once the documents step has run: the index holds beta.md's old hash
    lag = index_lag(Store(pg_url), index, collection)
    assert (lag.changed, lag.documents_behind) == ((["beta.md"], 1) if blocked_in == "chunks" else ([], 0))
    assert blocked_in == "documents" or lag.oldest_change is not None

    # No new edit from here on: ticks and the runs they ask for only. The janitor fails the dead run
    # (its own sensor), then the document sensor's reconciler sees the gap no run covers.
    _sweep(defs, instance)
    assert instance.get_run_by_id(next(iter(stored))).status == DagsterRunStatus.FAILURE  # swept
    healed = _tick(defs, instance, changed.cursor)
    (retry,) = healed.run_requests
    assert retry.tags["chunkyard/trigger"] == "reconcile" and retry.tags["chunkyard/attempt"] == "1"
    assert _tick(defs, instance, healed.cursor).run_requests == []  # covered by its own request
    assert _run(defs, instance, retry)
    assert _searchable(pg_url, index, WORD)
    done = _tick(defs, instance, healed.cursor)
    assert done.run_requests == []
    assert index_lag(Store(pg_url), index, collection).documents_behind == 0


def _wait_blocked(lock: psycopg.Connection, worker: subprocess.Popen, step: str) -> None:
    """Until the worker's run waits on the lock inside `step` (its connection shows a lock wait)."""
    deadline = time.monotonic() + 180
    probe = psycopg.connect(lock.info.dsn, autocommit=True)
    try:
        while True:
            assert worker.poll() is None, "the run ended before it reached the lock"
            assert time.monotonic() < deadline, f"the run never blocked in {step}"
            waiting = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s",
                (lock.info.backend_pid,),
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.2)
    finally:
        probe.close()


def test_a_gap_runs_keep_leaving_open_is_retried_with_backoff_then_given_up() -> None:
    policy = GapBackoff(backoff_seconds=10, max_attempts=3)
    assert decide([], 100.0, policy).action == "run"
    assert decide([Attempt(None)], 100.0, policy).action == "wait"  # one is queued or running
    one = [Attempt(100.0)]
    assert decide(one, 105.0, policy).action == "wait" and decide(one, 105.0, policy).retry_at == 110.0
    assert (
        decide(one, 110.0, policy) == decide(one, 111.0, policy) and decide(one, 110.0, policy).attempt == 2
    )
    two = [Attempt(100.0), Attempt(130.0)]
    assert decide(two, 145.0, policy).action == "wait"  # 10 s, then 20 s
    assert decide(two, 150.0, policy).action == "run" and decide(two, 150.0, policy).attempt == 3
    given_up = decide([*two, Attempt(200.0, succeeded=True)], 10_000.0, policy)
    assert given_up.action == "give_up" and "2 failed" in given_up.reason


def test_a_gap_that_runs_keep_failing_to_close_is_given_up_and_reported(
    project, pg_url: str, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After CHUNKYARD_RECONCILE_ATTEMPTS failed runs of one gap the tick requests nothing more and
    records it as reported; `chunkyard lag` still shows the index behind."""
    import argparse
    import uuid

    from chunkyard.assets.reconciling import COLLECTIONS_TAG, GAP_TAG
    from chunkyard.orchestration.cli_lag import cmd_lag
    from chunkyard.pipeline.reconcile import collection_gap
    from chunkyard.retrieval.settings.config import load_collections
    from dagster import DagsterRun

    collection, docs_dir, indexes_path, collections_path, defs = project
    instance = DagsterInstance.get()
    first = _tick(defs, instance, None)
    assert _run(defs, instance, first.run_requests[0])
    cursor = _tick(defs, instance, first.cursor).cursor
    (docs_dir / "gamma.txt").unlink()
    store = Store(pg_url)
    store.documents.sync(collection, [d for d in store.documents.read(collection) if d.id != "gamma.txt"])
    gap = collection_gap(
        store, load_collections(collections_path)[collection], [f"{collection}/recursive-48"]
    )
    assert gap and gap.lags[0].deleted == ["gamma.txt"]
    for _ in range(5):  # five reconcile runs of this gap, all failed
        instance.add_run(
            DagsterRun(
                job_name="__ASSET_JOB",
                run_id=uuid.uuid4().hex,
                status=DagsterRunStatus.FAILURE,
                tags={GAP_TAG: gap.digest(), COLLECTIONS_TAG: collection},
            )
        )
    seen = json.loads(cursor)
    del seen["collections"][collection]["gamma.txt"]  # the sensor saw the deletion (its run died)
    quiet = _tick(defs, instance, json.dumps(seen))
    assert [r for r in quiet.run_requests if r.tags["chunkyard/trigger"] == "reconcile"] == []
    assert json.loads(quiet.cursor)["reported"] == {collection: gap.digest()}

    # lag lists the indexes the settings declare: this test's own files, not the repository's project
    monkeypatch.setenv("CHUNKYARD_CONFIGS", str(collections_path.parent))
    cmd_lag(argparse.Namespace(collection=collection, json=False))
    out = capsys.readouterr().out
    assert f"{collection}/recursive-48: 1 document(s) behind (0 added, 0 changed, 1 deleted)" in out
    assert "\n  BM25 analysis: english\n" in out  # how its text and queries are analysed (set explicitly)


def test_a_file_written_after_the_ticks_scan_is_the_next_ticks_change_not_a_gap(project, pg_url: str) -> None:
    """The reconciler compares the store with what the tick's scan saw: a file written between the scan
    and the comparison gets one change request on the next tick, not a reconcile run as well."""
    from chunkyard.pipeline.documents import hash_folder
    from chunkyard.pipeline.reconcile import collection_gap
    from chunkyard.retrieval.settings.config import load_collections

    collection, docs_dir, indexes_path, collections_path, defs = project
    instance = DagsterInstance.get()
    first = _tick(defs, instance, None)
    assert _run(defs, instance, first.run_requests[0])
    settings = load_collections(collections_path)[collection]
    scanned = hash_folder(settings).hashes  # the tick's scan
    (docs_dir / "late.txt").write_text("A note written after the scan about otters.\n")
    (docs_dir / "gamma.txt").unlink()
    store = Store(pg_url)
    index = [f"{collection}/recursive-48"]
    assert not collection_gap(store, settings, index, scanned)
    unfiltered = collection_gap(store, settings, index)
    assert unfiltered.folder.added == ["late.txt"] and unfiltered.folder.deleted == ["gamma.txt"]
    # what the scan did see stays a gap: a run that died leaves it behind
    rescanned = hash_folder(settings).hashes
    assert collection_gap(store, settings, index, rescanned).folder == unfiltered.folder
