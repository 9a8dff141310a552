"""Evaluation only when its inputs changed (issue 39): with the published index, the eval set and the
settings as at the last evaluation, the evaluation and the leaderboard evaluate nothing and say so; an
eval-set edit re-evaluates. Real Dagster, the real database and model, and the real `chunkyard index`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chunkyard.retrieval.store import Store
from dagster import AssetSelection, instance_for_test, materialize

from tests.cli_helpers import STATE_VARIABLES
from tests.dagster_helpers import materializations, unique_name, write_project
from tests.test_assets import QUESTIONS

CLI = [sys.executable, "-m", "chunkyard.orchestration.cli"]


def _run(defs, instance):
    result = materialize(
        list(defs.assets), instance=instance, resources=defs.resources, selection=AssetSelection.all()
    )
    assert result.success
    return materializations(result)


def test_a_second_run_evaluates_nothing_and_an_eval_set_edit_re_evaluates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str, store: Store
) -> None:
    from chunkyard.assets.definitions import build_definitions

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    collection = unique_name("u")
    _, indexes_path, collections_path = write_project(
        tmp_path, collection, eval_set=QUESTIONS, configs=["token-48"]
    )
    defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
    evaluation, board = f"{collection}/token_48/evaluation", f"{collection}/leaderboard"
    index = f"{collection}/token-48"
    with instance_for_test() as instance:
        first = _run(defs, instance)
        assert "skipped" not in first[evaluation] and first[evaluation]["questions"] == len(QUESTIONS)
        recorded = store.evaluations.latest_record(index)
        assert recorded is not None

        second = _run(defs, instance)
        for key in (evaluation, board):
            assert second[key]["skipped"].startswith("unchanged, skipped:"), second[key]
            assert second[key]["inputs_version"] == first[key]["inputs_version"]
        assert store.evaluations.latest_record(index) == recorded  # nothing evaluated, nothing stored
        # the numbers stay on the asset (the UI shows the latest materialization's metadata)
        assert second[evaluation]["questions"] == len(QUESTIONS)
        assert second[board]["leaderboard"] == first[board]["leaderboard"]

        (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS[:3]))
        third = _run(defs, instance)
        assert "skipped" not in third[evaluation] and third[evaluation]["questions"] == 3
        assert "skipped" not in third[board]  # its input, the latest evaluation, is new
        assert store.evaluations.latest_record(index) != recorded


@pytest.mark.slow
def test_chunkyard_index_twice_says_unchanged_skipped_and_re_evaluates_after_an_eval_set_edit(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "birds.md").write_text(
        "# Birds\n\nSwallows fly south in autumn.\n\nThe heron waits by the pond.\n"
    )
    (docs / "tools.md").write_text("# Tools\n\nA chisel cuts wood along the grain.\n")
    project = tmp_path / "proj"
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}

    def run(*argv: str, cwd: Path = project) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)

    assert run("init", str(project), cwd=tmp_path).returncode == 0
    assert run("add", "mine", str(docs), "--index", "recursive-256").returncode == 0
    questions = [
        {
            "id": "q1",
            "question": "Where do swallows go?",
            "references": [{"doc": "birds.md", "text": "fly south"}],
        },
        {"id": "q2", "question": "What cuts wood?", "references": [{"doc": "tools.md", "text": "A chisel"}]},
    ]
    eval_set = project / "questions.jsonl"
    eval_set.write_text("".join(json.dumps(q) + "\n" for q in questions))
    text = (project / "chunkyard.yaml").read_text()
    (project / "chunkyard.yaml").write_text(
        text.replace("    indexes:", "    eval_set: questions.jsonl\n    indexes:")
    )
    unchanged = "Evaluation: unchanged, skipped (mine/recursive_256/evaluation, mine/leaderboard:"
    first = run("index")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "unchanged, skipped" not in first.stdout
    second = run("index")
    assert second.returncode == 0, second.stdout + second.stderr
    assert unchanged in second.stdout, second.stdout
    eval_set.write_text(json.dumps(questions[0]) + "\n")
    third = run("index")
    assert third.returncode == 0, third.stdout + third.stderr
    assert "unchanged, skipped" not in third.stdout, third.stdout
