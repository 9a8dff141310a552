"""The asset graph on a real database with the real model: full materialisation, bad input, checks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from chunkyard.assets.resources import PostgresResource
from dagster import AssetCheckSeverity, AssetSelection, DagsterEventType, instance_for_test, materialize

from tests.dagster_helpers import DOCS, check_results, ids, materializations, unique_name, write_project

QUESTIONS = [
    {
        "id": "q1",
        "question": "Which words does BM25 score highly?",
        "references": [{"doc": "alpha.md", "text": "BM25 scores rare words such as zyxomorphic highly."}],
    },
    {
        "id": "q2",
        "question": "How does the sensor notice changes?",
        "references": [{"doc": "beta.md", "text": "The sensor hashes file contents to notice changes."}],
    },
    {
        "id": "q3",
        "question": "What measures whether the right span is near the top?",
        "references": [{"doc": "gamma.txt", "text": "Hit rate at five and reciprocal rank measure"}],
    },
    {
        "id": "q4",
        "question": "Do readers ever see half an index?",
        "references": [{"doc": "beta.md", "text": "readers never see half an index"}],
    },
]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str) -> str:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    return pg_url


def _materialize_all(defs, instance, keys=None, *, raise_on_error: bool = True):
    selection = AssetSelection.assets(*keys) if keys else AssetSelection.all()
    return materialize(
        list(defs.assets),
        instance=instance,
        resources=defs.resources,
        selection=selection,
        raise_on_error=raise_on_error,
    )


def test_full_graph_materialises_with_checks_evaluation_and_leaderboard(tmp_path: Path, env: str) -> None:
    from chunkyard.assets.definitions import build_definitions

    collection = unique_name("a")
    _, indexes_path, collections_path = write_project(tmp_path, collection, eval_set=QUESTIONS)
    defs = build_definitions(indexes_path, collections_path, database_url=env)
    with instance_for_test() as instance:
        result = _materialize_all(defs, instance)
        assert result.success
        meta = materializations(result)
        assert meta[f"{collection}/documents"]["documents_added"] == len(DOCS)
        for config in ("token_48", "recursive_48"):
            prefix = f"{collection}/{config}"
            assert meta[f"{prefix}/chunks"]["chunks_staged"] > 0
            assert meta[f"{prefix}/publish"]["chunks_total"] == meta[f"{prefix}/chunks"]["chunks_staged"]
            # the UI shows how the index's text and queries are analysed (set explicitly: no languages)
            assert meta[f"{prefix}/publish"]["analyzers"] == "english"
            assert meta[f"{prefix}/publish"]["languages"] == "-"
            evaluation = meta[f"{prefix}/evaluation"]
            floats = {k: v for k, v in evaluation.items() if isinstance(v, float)}
            assert any(k.startswith("dense/") for k in floats) and any(k.startswith("bm25/") for k in floats)
            assert all(0.0 <= v <= 1.0 for k, v in floats.items() if "hit" in k or "mrr" in k)
            assert evaluation["questions"] == len(QUESTIONS)
        board = meta[f"{collection}/leaderboard"]
        assert "token-48" in board["leaderboard"] and "recursive-48" in board["leaderboard"]
        assert Path(board["chart_path"]).is_file()
        checks = check_results(result)
        assert len(checks) == 2 * (3 + 1 + 3 + 1)
        failed = {k: c.metadata for k, c in checks.items() if not c.passed}
        assert not failed

        # Second run: nothing changed, nothing embedded, evaluation unchanged -> no regression warning.
        again = _materialize_all(defs, instance)
        assert again.success
        meta2 = materializations(again)
        for config in ("token_48", "recursive_48"):
            emb = meta2[f"{collection}/{config}/embeddings"]
            assert emb["embeddings_computed"] == 0
        # the evaluation's inputs are unchanged: nothing evaluated, the regression check passes and says why
        assert meta2[f"{collection}/token_48/evaluation"]["skipped"].startswith("unchanged, skipped")
        regression = check_results(again)[f"{collection}/token_48/evaluation:no_regression"]
        assert regression.passed and "unchanged, skipped" in regression.metadata["note"].value
        assert regression.severity == AssetCheckSeverity.WARN


def test_regression_check_flags_drops_beyond_tolerance() -> None:
    from chunkyard.pipeline.checks import regression

    previous = {"dense/hit_at_5": 0.90, "bm25/mrr_at_5": 0.60, "hybrid/recall_at_5": 0.70}
    check = regression({**previous, "bm25/mrr_at_5": 0.595}, previous, tolerance=0.01)
    assert check.passed and check.metadata["metrics_dropped"] == 0 and check.severity == "warn"
    check = regression({**previous, "dense/hit_at_5": 0.80}, previous, tolerance=0.01)
    assert not check.passed and check.metadata["metrics_dropped"] == 1
    assert check.metadata["drops"] == "dense/hit_at_5: -0.1000"
    assert check.metadata["largest_drop"] == pytest.approx(-0.1)


def failure_rows(meta: dict) -> list[tuple[str, str]]:
    """(file, reason) of the documents asset's failures table: typed rows, read as the CLI reads them."""
    return [(str(row.data["file"]), str(row.data["reason"])) for row in meta["failures"].records]


def test_bad_files_are_reported_and_the_rest_is_indexed(tmp_path: Path, env: str) -> None:
    from chunkyard.assets.definitions import build_definitions

    collection = unique_name("b")
    docs = {**DOCS, "empty.md": "", "latin1.txt": "caf\xe9 cr\xe8me".encode("latin-1")}
    _, indexes_path, collections_path = write_project(tmp_path, collection, docs=docs, configs=["token-48"])
    defs = build_definitions(indexes_path, collections_path, database_url=env)
    with instance_for_test() as instance:
        result = _materialize_all(defs, instance)
        assert result.success
        meta = materializations(result)[f"{collection}/documents"]
        assert meta["documents_added"] == len(DOCS) and meta["documents_failed"] == 2
        rows = failure_rows(meta)
        assert ("empty.md", "empty file") in rows
        assert ("latin1.txt", "not valid UTF-8: byte 0xe9 at offset 3") in [
            (f, r[: len("not valid UTF-8: byte 0xe9 at offset 3")]) for f, r in rows
        ]
        warnings = [
            e.message
            for e in instance.all_logs(result.run_id)
            if e.level >= 30 and e.dagster_event is None and e.message
        ]
        assert any("empty.md: empty file" in w for w in warnings)
        assert any("latin1.txt: not valid UTF-8" in w for w in warnings)
        chunked = ids(materializations(result)[f"{collection}/token_48/chunks"]["rechunked_documents"])
        assert chunked == sorted(DOCS)


def test_missing_folder_is_reported_and_keeps_the_index(tmp_path: Path, env: str) -> None:
    from chunkyard.assets.definitions import build_definitions

    collection = unique_name("m")
    docs_dir, indexes_path, collections_path = write_project(tmp_path, collection, configs=["token-48"])
    defs = build_definitions(indexes_path, collections_path, database_url=env)
    with instance_for_test() as instance:
        assert _materialize_all(defs, instance).success
        moved = docs_dir.rename(tmp_path / "elsewhere")
        result = _materialize_all(defs, instance)
        assert result.success  # the run goes on
        meta = materializations(result)
        docs_meta = meta[f"{collection}/documents"]
        assert any("documents folder not found" in reason for _, reason in failure_rows(docs_meta))
        assert docs_meta["documents_deleted"] == 0 and docs_meta["documents_unchanged"] == len(DOCS)
        assert meta[f"{collection}/token_48/publish"]["documents_total"] == len(DOCS)
        assert any(
            "documents folder not found" in (e.message or "") for e in instance.all_logs(result.run_id)
        )
        moved.rename(docs_dir)


def test_two_folders_one_missing_indexes_the_other(tmp_path: Path, env: str) -> None:
    from chunkyard.assets.definitions import build_definitions

    collection = unique_name("f")
    other = tmp_path / "notes"
    other.mkdir()
    (other / "n.md").write_text("# Notes\n\nA second folder of the same collection.\n")
    _, indexes_path, collections_path = write_project(
        tmp_path, collection, configs=["token-48"], folders=[str(other), str(tmp_path / "absent")]
    )
    defs = build_definitions(indexes_path, collections_path, database_url=env)
    with instance_for_test() as instance:
        result = _materialize_all(defs, instance)
        assert result.success
        meta = materializations(result)
        assert meta[f"{collection}/documents"]["documents_added"] == 1
        assert ids(meta[f"{collection}/token_48/chunks"]["rechunked_documents"]) == ["notes/n.md"]
        rows = failure_rows(meta[f"{collection}/documents"])
        assert any(f == "absent" and r.startswith("documents folder not found") for f, r in rows)
        step_failures = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
        assert step_failures == []


def test_chunks_over_the_model_limit_fail_the_token_check(tmp_path: Path, env: str) -> None:
    from chunkyard.assets.definitions import build_definitions
    from chunkyard.chunking.tokenizers import get_tokenizer
    from chunkyard.pipeline.checks import check_token_limit
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.integrity import embed_texts

    collection = unique_name("l")
    # 250 words pass `check` (250 <= 256), but "word17" is two of the model's tokens: only the run can know
    words = " ".join(f"word{i} alpha beta gamma" for i in range(200))  # ~800 words, far over 256 tokens
    indexes = {
        "indexes": {
            "words-250": {"chunker": {"strategy": "token", "size": 250, "overlap": 0, "tokenizer": "words"}}
        }
    }
    _, indexes_path, collections_path = write_project(
        tmp_path, collection, docs={"long.txt": words}, indexes=indexes
    )
    defs = build_definitions(indexes_path, collections_path, database_url=env)
    with instance_for_test() as instance:
        result = _materialize_all(defs, instance, raise_on_error=False)
        assert not result.success  # an error-level check is blocking: nothing after it runs
        check = check_results(result)[f"{collection}/words_250/chunks:within_model_token_limit"]
        assert not check.passed and check.severity == AssetCheckSeverity.ERROR
        assert check.metadata["chunks_over_limit"].value >= 1
        assert check.metadata["model_token_limit"].value == 256
        assert f"{collection}/words_250/publish" not in materializations(result)
    info = Store(env).indexes.info(f"{collection}/words-250") or {}
    assert not info.get("published_at") and not info.get("chunk_count")  # never published
    # A config that allows truncation passes the same chunks and reports the truncated share.
    check = check_token_limit(
        embed_texts(Store(env), f"{collection}/words-250", "staged"),
        get_tokenizer("model"),
        256,
        allow_truncation=True,
    )
    assert check.passed and 0.0 < check.metadata["share_truncated"] <= 1.0


def test_a_failed_blocking_check_leaves_the_previous_version_published(tmp_path: Path, env: str) -> None:
    """A staged error-level check that fails stops the publish in the same run, and automation
    requests nothing below it while it stands failed: readers keep the previous version."""
    from chunkyard.assets.definitions import build_definitions
    from chunkyard.retrieval.store import Store
    from dagster import evaluate_automation_conditions

    collection = unique_name("b")
    indexes = {
        "indexes": {
            "words-250": {"chunker": {"strategy": "token", "size": 250, "overlap": 0, "tokenizer": "words"}}
        }
    }
    docs_dir, indexes_path, collections_path = write_project(
        tmp_path, collection, docs={"short.txt": "The zyxomorphic llama eats hay."}, indexes=indexes
    )
    defs = build_definitions(indexes_path, collections_path, database_url=env)
    name = f"{collection}/words-250"
    store = Store(env)
    with instance_for_test() as instance:
        assert _materialize_all(defs, instance).success
        published = store.indexes.info(name)
        assert published is not None and published["chunk_count"] == 1
        before = evaluate_automation_conditions(defs=defs, instance=instance)
        # ~800 words: the chunks now exceed the model's 256-token input, which the config does not allow
        (docs_dir / "short.txt").write_text(" ".join(f"word{i} alpha beta gamma" for i in range(200)))
        result = _materialize_all(defs, instance, raise_on_error=False)
        assert not result.success
        check = check_results(result)[f"{collection}/words_250/chunks:within_model_token_limit"]
        assert not check.passed
        done = materializations(result)
        assert f"{collection}/words_250/chunks" in done
        assert not {f"{collection}/words_250/{kind}" for kind in ("embeddings", "bm25", "publish")} & set(
            done
        )
        after = store.indexes.info(name)
        assert after["version"] == published["version"] and after["chunk_count"] == 1
        # The chunks were materialized, but while their blocking check stands failed automation
        # requests nothing below them (plain eager() would publish them: embeddings, bm25, index).
        later = evaluate_automation_conditions(defs=defs, instance=instance, cursor=before.cursor)
        assert later.total_requested == 0


def test_evaluation_skips_questions_about_deleted_documents(tmp_path: Path, env: str) -> None:
    from chunkyard.assets.definitions import build_definitions

    collection = unique_name("q")
    docs_dir, indexes_path, collections_path = write_project(
        tmp_path, collection, eval_set=QUESTIONS, configs=["token-48"]
    )
    defs = build_definitions(indexes_path, collections_path, database_url=env)
    with instance_for_test() as instance:
        assert _materialize_all(defs, instance).success
        (docs_dir / "gamma.txt").unlink()
        result = _materialize_all(defs, instance)
        assert result.success
        evaluation = materializations(result)[f"{collection}/token_48/evaluation"]
        assert evaluation["questions"] == len(QUESTIONS) - 1 and evaluation["questions_skipped"] == 1
        warnings = [e.message for e in instance.all_logs(result.run_id) if e.level >= 30 and e.message]
        assert any("1 question(s) skipped" in w and "q3" in w for w in warnings)


def test_one_store_per_execution_closed_after_it(pg_url: str, store) -> None:
    """The postgres resource opens one Store (one pool, one migration check) for the steps of an
    execution, and its teardown closes the pool's connections."""
    from dagster import asset, materialize

    seen = []

    def use(postgres: PostgresResource) -> None:
        opened = postgres.store()
        with opened.connection() as conn:
            seen.append((opened, conn.info.backend_pid))

    @asset
    def first(postgres: PostgresResource) -> None:
        use(postgres)

    @asset(deps=[first])
    def second(postgres: PostgresResource) -> None:
        use(postgres)

    assert materialize([first, second], resources={"postgres": PostgresResource(url=pg_url)}).success
    assert len(seen) == 2 and seen[0][0] is seen[1][0]
    pids = sorted({pid for _, pid in seen})
    deadline = time.monotonic() + 10
    while True:
        with store.connection() as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]).fetchone()
        if row[0] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert row[0] == 0, f"connections {pids} outlived the run"
