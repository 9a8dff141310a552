"""Issue 26's fifteen snags of a newcomer's first hour, each tested here or mapped to the test that
covers it (the map is checked: every named test exists)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from chunkyard.evaluation.estimates import Estimate
from chunkyard.evaluation.metrics import MetricSummary
from chunkyard.evaluation.reports import leaderboard
from chunkyard.evaluation.runner import EvaluationReport
from dagster import AssetKey

TESTS = Path(__file__).resolve().parent


# Each snag of issue 26 -> the tests that cover it ("file::test"; those in this file test it here).
SNAGS: dict[int, tuple[str, ...]] = {
    1: (  # a failed check reported as success; green again on an unchanged rerun
        "test_config_checks.py::test_a_failed_check_fails_index_and_stays_failed_on_an_unchanged_rerun",
    ),
    2: (  # config errors half a minute in; `indexes: recursive-256` as a string
        "test_config_checks.py::test_a_typo_in_any_field_stops_index_with_file_line_and_allowed_values",
        "test_config_checks.py::test_all_problems_are_listed_at_once_and_check_shows_the_plan",
        "test_config_checks.py::test_the_dagster_definitions_refuse_a_bad_chunker_too",
    ),
    3: (  # a missing collection folder (`folders: [dosc]`) is an error
        "test_config_checks.py::test_a_typo_in_any_field_stops_index_with_file_line_and_allowed_values",
    ),
    4: (
        "test_before_index.py::test_search_and_serve_before_any_index",
    ),  # search, serve, /readyz, /v1/indexes
    5: (  # progress inside every long step, in the step log and on the terminal
        "test_eval_collection.py::test_eval_collection_uses_its_eval_set_and_folder_and_reports_the_notes",
    ),
    6: (  # eval --collection, ambiguous references and dropped questions said
        "test_eval_collection.py::test_eval_collection_uses_its_eval_set_and_folder_and_reports_the_notes",
        "test_assets.py::test_evaluation_skips_questions_about_deleted_documents",
        "test_datasets.py::test_jsonl_eval_set_spans_answers_ambiguity_and_missing",
    ),
    7: ("test_newcomer_snags.py::test_snag_7_the_ui_runs_no_automation_unless_the_project_says_so",),
    8: ("test_cli_conventions.py::test_ctrl_c_during_index_is_one_line_and_the_next_run_resumes",),
    9: (
        "test_newcomer_snags.py::test_snag_9_the_ui_hint_only_when_no_error_names_the_cause",
        "test_config_checks.py::test_a_failed_check_fails_index_and_stays_failed_on_an_unchanged_rerun",
    ),
    10: (  # rounded scores, integer ranks, --json, page/slide, --no-service, the leaderboard's best
        "test_cli.py::test_own_documents_walkthrough_then_serve_and_sigterm",
        "test_newcomer_snags.py::test_snag_10_the_leaderboards_best_breaks_recall_ties_by_mrr",
    ),
    11: ("test_cli.py::test_own_documents_walkthrough_then_serve_and_sigterm",),  # Client() finds the service
    12: (  # --version, bare help, descriptions, --project/--debug, one-line errors, --filters, no LLM default
        "test_cli_conventions.py::test_version_and_help_on_a_bare_command",
        "test_cli_conventions.py::test_every_command_and_argument_is_described",
        "test_cli_conventions.py::test_usage_errors_are_one_line_with_a_help_hint",
        "test_cli_conventions.py::test_project_and_debug_after_eval_instance_and_compose",
        "test_cli_conventions.py::test_questions_generate_names_no_default_model",
    ),
    13: (
        "test_newcomer_snags.py::test_snag_13_runs_are_named_per_collection_and_the_embeddings_kind_is_the_backend",
        "test_newcomer_snags.py::test_snag_13_the_counts_say_what_was_rechunked_and_what_was_embedded",
        "test_eval_collection.py::test_eval_collection_uses_its_eval_set_and_folder_and_reports_the_notes",
    ),
    14: (  # HTML boilerplate, PPTX speaker notes, headings
        "test_formats.py::test_html_keeps_the_main_text_and_drops_navigation_and_footers",
        "test_formats.py::test_pptx_chunks_know_their_slide",
        "test_chunking.py::test_recursive_headings_start_the_chunk_they_title",
    ),
    15: (
        "test_search_service.py::test_an_empty_query_is_worded_alike_in_process_over_http_and_by_the_client",
    ),
}


def test_every_snag_names_tests_that_exist() -> None:
    """The map covers snags 1-15, and every test it names is a test function of that file."""
    assert sorted(SNAGS) == list(range(1, 16))
    for snag, tests in SNAGS.items():
        assert tests, snag
        for name in tests:
            file, _, function = name.partition("::")
            tree = ast.parse((TESTS / file).read_text(encoding="utf-8"))
            defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            assert function in defined, f"snag {snag}: {name} does not exist"


def test_snag_9_the_ui_hint_only_when_no_error_names_the_cause() -> None:
    """A failed run whose step error names the cause says to fix it; only an unexplained failure
    sends the user to `chunkyard ui` for the step logs."""
    from chunkyard.orchestration.run_report import failure_hint

    named = failure_hint(["mine__recursive_256__chunks: chunker.size: must be > 0, got -5"])
    assert named.startswith("fix the cause above") and "chunkyard ui" not in named
    assert "chunkyard ui" in failure_hint([])


def _report(index: str, variant: str, **means: float) -> EvaluationReport:
    overall = {name: Estimate(value, value, value, 4) for name, value in means.items()}
    summary = MetricSummary(per_question={}, corpus_of={}, overall=overall)
    return EvaluationReport(index, index.split("/")[-1], "mine", 5, [variant], 4, {variant: summary})


def test_snag_10_the_leaderboards_best_breaks_recall_ties_by_mrr() -> None:
    """`chunkyard index` suggests the first row: on a recall tie, the higher MRR, not the first listed."""
    board = leaderboard(
        [
            _report("mine/recursive-256", "bm25", recall_at_5=1.0, mrr_at_5=0.75, hit_at_5=1.0),
            _report("mine/recursive-256", "dense", recall_at_5=1.0, mrr_at_5=1.0, hit_at_5=1.0),
            _report("mine/token-256", "dense", recall_at_5=0.5, mrr_at_5=1.0, hit_at_5=1.0),
            _report("mine/token-128", "dense", mrr_at_5=1.0),  # no recall: last
        ]
    )
    assert [(row.index, row.variant) for row in board.rows] == [
        ("mine/recursive-256", "dense"),
        ("mine/recursive-256", "bm25"),
        ("mine/token-256", "dense"),
        ("mine/token-128", "dense"),
    ]


def test_snag_13_runs_are_named_per_collection_and_the_embeddings_kind_is_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`chunkyard index demo` runs job `index_demo` (not `__ephemeral_asset_job__`), over exactly the
    collection's assets; the UI's kind tag on an embeddings asset names the backend that embeds it."""
    from chunkyard.assets.definitions import INDEX_ALL_JOB, build_definitions, index_job
    from chunkyard.retrieval.settings.config import load_index_configs

    monkeypatch.delenv("CHUNKYARD_EMBEDDER_BACKEND", raising=False)
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    job = index_job(defs, ["demo"])
    assert job.name == "index_demo"
    demo_keys = {k for k in graph.get_all_asset_keys() if k.path[0] == "demo"}
    assert set(job.asset_layer.executable_asset_keys) == demo_keys
    assert index_job(defs, ["demo", "other"]).name == INDEX_ALL_JOB
    configs = load_index_configs()
    for name in ("recursive_256", "token_256"):
        backend = configs[name.replace("_", "-")].embedder["backend"]
        node = graph.get(AssetKey(["demo", name, "embeddings"]))
        assert {"onnx": "onnx", "torch": "pytorch"}[backend] in node.kinds and "pgvector" in node.kinds
    assert "onnx" in graph.get(AssetKey(["demo", "recursive_256", "embeddings"])).kinds


def test_snag_13_the_counts_say_what_was_rechunked_and_what_was_embedded() -> None:
    """A one-sentence edit re-chunks its document whole, but embeds only the chunks with new text."""
    from chunkyard.orchestration.run_report import count_lines

    lines = count_lines({"staged": 96, "rechunked": [1], "kept": 400, "computed": 3, "reused": 93})
    assert lines == [
        "Chunks (1 config): 96 re-chunked from 1 document added or changed since the last publish, "
        "400 kept unchanged "
        "(neither re-chunked nor re-embedded)",
        "Embeddings: 3 computed for new text, 93 reused from the embedding cache (text embedded before)",
    ]
    # two configs with the same five documents changed: five documents, not ten
    two = count_lines({"staged": 271, "rechunked": [5, 5], "kept": 37, "computed": 182, "reused": 89})
    assert two[0].startswith(
        "Chunks (2 configs): 271 re-chunked from 5 documents added or changed since the last publish, in each"
    )
    uneven = count_lines({"staged": 9, "rechunked": [5, 1], "kept": 0, "computed": 9, "reused": 0})
    assert "from 5 and 1 documents added or changed since each config's last publish" in uneven[0]


def test_snag_7_the_ui_runs_no_automation_unless_the_project_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`chunkyard ui` loads the code location with CHUNKYARD_AUTOMATION=0 unless chunkyard.yaml says
    `ui_automation: true`: the document sensor and automation then start stopped, and the UI's first
    lines say which it is. Elsewhere (the stack's daemon) both start running, as before."""
    from chunkyard.assets.definitions import build_definitions
    from chunkyard.orchestration.cli_ui import what_it_runs
    from chunkyard.retrieval.settings.project import (
        AUTOMATION_ENV,
        SettingsError,
        read_project,
        ui_automation,
    )
    from dagster import DefaultSensorStatus

    def statuses() -> set[DefaultSensorStatus]:
        defs = build_definitions()
        names = ("chunkyard_automation", "document_update_sensor")
        return {defs.resolve_sensor_def(name).default_status for name in names}

    monkeypatch.delenv(AUTOMATION_ENV, raising=False)
    assert statuses() == {DefaultSensorStatus.RUNNING}
    monkeypatch.setenv(AUTOMATION_ENV, "0")
    assert statuses() == {DefaultSensorStatus.STOPPED}

    (tmp_path / "chunkyard.yaml").write_text("benchmarks: false\n")
    assert ui_automation(read_project(tmp_path)) is False
    assert what_it_runs(False).startswith("Automation off: nothing runs until you launch it")
    (tmp_path / "chunkyard.yaml").write_text("benchmarks: false\nui_automation: true\n")
    assert ui_automation(read_project(tmp_path)) is True
    assert "document sensor re-indexes changed files" in what_it_runs(True)
    (tmp_path / "chunkyard.yaml").write_text("benchmarks: false\nui_automation: yes please\n")
    with pytest.raises(SettingsError, match=r"chunkyard\.yaml:2: ui_automation: must be true or false"):
        read_project(tmp_path)


def test_the_suggested_search_runs_the_leaderboards_best_variant() -> None:
    """The leaderboard's best row is a variant: `served` needs no flag, `<mode>+rerank` is a mode and a
    reranker (`--mode served` or `--mode hybrid+rerank` would be refused by `chunkyard search`)."""
    from chunkyard.orchestration.cli_search import suggestion

    best = "(the leaderboard's best)"
    assert suggestion("mine", ("mine/a", "served")).endswith(f"--index mine/a {best}")
    assert suggestion("mine", ("mine/a", "bm25")).endswith(f"--index mine/a --mode bm25 {best}")
    assert suggestion("mine", ("mine/a", "hybrid+rerank")).endswith(
        f"--index mine/a --mode hybrid --rerank maxsim {best}"
    )


def test_the_suggested_rerank_is_the_one_the_index_config_names(tmp_path, monkeypatch) -> None:
    """`<mode>+rerank` ran the index config's reranker, so the suggestion names that one, not maxsim."""
    from chunkyard.orchestration.cli_search import suggestion

    (tmp_path / "indexes.yaml").write_text(
        "indexes:\n  a:\n    chunker: {strategy: token, size: 64}\n"
        "    rerank: {model: 'cross-encoder:/models/ms-marco'}\n"
    )
    (tmp_path / "collections.yaml").write_text("collections:\n  mine: {folders: [docs], indexes: [a]}\n")
    monkeypatch.setenv("CHUNKYARD_CONFIGS", str(tmp_path))
    # mine/a is the only collection's only index, the default: it needs no --index
    assert suggestion("mine", ("mine/a", "dense+rerank")).endswith(
        '"your question" --mode dense --rerank cross-encoder:/models/ms-marco (the leaderboard\'s best)'
    )
