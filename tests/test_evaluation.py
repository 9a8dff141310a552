"""The evaluation runner, leaderboard and `chunkyard eval` driver on a real Postgres and the real model."""

from __future__ import annotations

import json
import math

import pytest
from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets import Question, Span, load_dataset
from chunkyard.evaluation.estimates import Estimate
from chunkyard.evaluation.metrics import score_question
from chunkyard.evaluation.reports import leaderboard
from chunkyard.evaluation.runner import (
    EvaluationReport,
    EvaluationRequest,
    ReportFormatError,
    evaluate_index,
    latest_reports,
    parse_variant,
)
from chunkyard.pipeline.benchmark import main as eval_main
from psycopg.types.json import Jsonb

from tests.conftest import CHROMA_DIR, requires_chroma

PASSAGES = {
    "tides.md": (
        "Tides are caused mainly by the gravitational pull of the Moon on the oceans. "
        "The Sun contributes a smaller effect, and spring tides happen when both align.\n\n"
        "Neap tides occur when the Sun and Moon are at right angles, which weakens the bulge."
    ),
    "bread.md": (
        "Sourdough bread rises because wild yeast and lactic acid bacteria ferment the dough. "
        "A starter is fed with flour and water every day to keep the culture alive.\n\n"
        "Baking at a high temperature with steam gives the loaf its crisp crust."
    ),
}


def _span(doc: str, phrase: str) -> Span:
    text = PASSAGES[doc]
    start = text.index(phrase)  # test fixture only: the library never locates spans this way
    return Span(doc, start, start + len(phrase))


QUESTIONS = [
    Question(
        "q1", "What causes tides?", [_span("tides.md", "gravitational pull of the Moon")], corpus="tides"
    ),
    Question(
        "q2",
        "When do neap tides occur?",
        [_span("tides.md", "Neap tides occur when the Sun and Moon are at right angles")],
        corpus="tides",
    ),
    Question(
        "q3",
        "Why does sourdough rise?",
        [_span("bread.md", "wild yeast and lactic acid bacteria ferment the dough")],
        corpus="bread",
    ),
    Question(
        "q4",
        "How is a sourdough starter kept alive?",
        [_span("bread.md", "fed with flour and water every day")],
        corpus="bread",
    ),
]


@pytest.fixture(scope="module")
def built_index(pg_url, embedder):
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
    from chunkyard.retrieval.store import Store

    store = Store(pg_url)
    store.migrate()
    docs = [Document(doc_id, text) for doc_id, text in PASSAGES.items()]
    store.documents.sync("evaltest", docs, [])
    config = IndexConfig(
        name="words-12", chunker={"strategy": "token", "size": 12, "overlap": 0, "tokenizer": "words"}
    )
    spec = IndexSpec("evaltest", config)
    build_index(store, spec, embedder)
    return store, spec, Searcher(store, embedder)


def test_served_recall_under_a_budget_counts_what_the_trimmed_search_returns(pg_url, embedder):
    """A budget smaller than any chunk: whole chunks give nothing, the trimmed search its best sentences."""
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
    from chunkyard.retrieval.store import Store

    store = Store(pg_url)
    store.migrate()
    store.documents.sync("evaltrim", [Document(doc_id, text) for doc_id, text in PASSAGES.items()], [])
    config = IndexConfig(
        name="words-60", chunker={"strategy": "token", "size": 60, "overlap": 0, "tokenizer": "words"}
    )
    spec = IndexSpec("evaltrim", config)
    build_index(store, spec, embedder)
    report = evaluate_index(
        Searcher(store, embedder),
        spec,
        QUESTIONS,
        EvaluationRequest(variants=("served", "bm25"), k=3, budgets=(30, 1024), n_resamples=50),
        store=store,
    )
    served = report.metrics["served"]
    assert served["budget_chunks_30"] == 0.0 and served["budget_recall_30"] == 0.0
    assert served["trimmed_recall_30"] >= 0.5
    assert served["trimmed_recall_1024"] == served["budget_recall_1024"] == 1.0
    assert "trimmed_recall_30" not in report.metrics["bm25"]  # only served: what a budgeted request gets


def test_evaluate_index_every_mode_with_cost_and_latency(built_index):
    store, spec, searcher = built_index
    report = evaluate_index(
        searcher,
        spec,
        QUESTIONS,
        EvaluationRequest(
            variants=("dense", "bm25", "hybrid", "hybrid+rerank"), k=3, dataset="tiny", n_resamples=200
        ),
        store=store,
    )
    assert set(report.metrics) == {"dense", "bm25", "hybrid", "hybrid+rerank"}
    for variant, values in report.metrics.items():
        for name in (
            "hit_at_3",
            "mrr_at_3",
            "recall_at_3",
            "chroma_iou_at_3",
            "recall_at_20",
            "budget_recall_1024",
        ):
            assert 0.0 <= values[name] <= 1.0, (variant, name)
        assert (
            report.estimate(variant, "hit_at_3").low
            <= values["hit_at_3"]
            <= report.estimate(variant, "hit_at_3").high
        )
    # Two short documents: dense returns every chunk and 1024 tokens hold them all.
    assert report.metrics["dense"]["budget_recall_1024"] == 1.0
    # BM25 on word-for-word questions finds a relevant chunk for every question.
    assert report.metrics["bm25"]["hit_at_3"] == 1.0
    assert report.cost["chunks"] >= 6
    assert report.cost["overlap_overhead"] == pytest.approx(0.0, abs=1e-9)
    assert report.cost["share_over_model_limit"] == 0.0
    assert report.latency["dense"]["p50_ms"] > 0
    headline = report.headline()
    assert headline["dense/hit_at_3"] == report.metrics["dense"]["hit_at_3"]
    assert "cost/chunks" in headline and all(isinstance(v, float) for v in headline.values())
    assert set(headline) == {
        f"{variant}/{name}_at_3"
        for variant in report.variants
        for name in ("hit", "mrr", "recall", "precision", "iou")
    } | {"cost/chunks"}
    quality = report.quality()
    assert "hybrid/chroma_iou_at_3" in quality and "bm25/budget_recall_2048" in quality
    assert not any(key.startswith("cost/") or "context_tokens" in key for key in quality)
    text = report.markdown()
    assert "| hybrid+rerank |" in text and "recall_at_3" in text and "ndcg_at_3" in text
    assert json.loads(report.json())["summaries"]["bm25"]["n_questions"] == 4


def test_report_round_trips_through_its_dict_and_json(built_index):
    store, spec, searcher = built_index
    report = evaluate_index(
        searcher,
        spec,
        QUESTIONS,
        EvaluationRequest(
            variants=("dense", "bm25"),
            k=2,
            dataset="tiny",
            n_resamples=50,
            notes=["tiny.yaml (q9): answer_start 3 re-located to 7"],
        ),
        store=store,
    )
    assert report.notes == ["tiny.yaml (q9): answer_start 3 re-located to 7"]
    assert "Loader notes (1" in report.markdown()
    data = report.as_dict()
    again = EvaluationReport.from_dict(data)
    assert again == report
    assert again.as_dict() == data
    assert again.summaries["dense"].by_corpus == report.summaries["dense"].by_corpus
    assert again.estimate("bm25", "recall_at_2") == report.estimate("bm25", "recall_at_2")
    through_json = EvaluationReport.from_dict(json.loads(json.dumps(data, allow_nan=False)))
    assert through_json == report and through_json.headline() == report.headline()
    # NaN (no timings, an empty estimate) is stored as None and read back as NaN.
    report.latency["dense"]["p50_ms"] = math.nan
    report.summaries["dense"].overall["hit_at_2"] = Estimate(math.nan, math.nan, math.nan, 0)
    data = json.loads(json.dumps(report.as_dict(), allow_nan=False))
    assert data["latency"]["dense"]["p50_ms"] is None
    back = EvaluationReport.from_dict(data)
    assert math.isnan(back.latency["dense"]["p50_ms"]) and back.estimate("dense", "hit_at_2").n == 0
    assert "dense/hit_at_2" not in back.headline() and back.as_dict() == data


def test_reports_recorded_in_the_store_come_back_for_the_leaderboard(built_index):
    store, spec, searcher = built_index
    report = evaluate_index(
        searcher,
        spec,
        QUESTIONS,
        EvaluationRequest(variants=("dense",), k=2, dataset="tiny", n_resamples=50),
        store=store,
    )
    store.evaluations.record(spec.name, report)
    assert store.evaluations.latest(spec.name) == report.as_dict()
    assert store.indexes.info(spec.name)["latest_evaluation"]["report"] == report.as_dict()
    # An evaluation recorded by an older chunkyard (flat metrics) is left out, not fatal.
    with store.connection() as conn:
        conn.execute(
            "INSERT INTO evaluations (index_name, dataset, report) VALUES (%s, %s, %s)",
            ("evaltest/flat-old", "tiny", Jsonb({"dense/hit_at_5": 0.5, "questions": 4.0})),
        )
    with pytest.raises(ReportFormatError, match="'format'"):
        EvaluationReport.from_dict(store.evaluations.latest("evaltest/flat-old"))
    reports = latest_reports(store, ["evaltest/never-evaluated", "evaltest/flat-old", spec.name])
    assert reports == [report]
    board = leaderboard(reports)
    assert [row.variant for row in board.rows] == ["dense"]
    assert board.rows[0].estimates["recall_at_2"] == report.estimate("dense", "recall_at_2")


def test_a_report_stored_before_variants_were_named_still_loads(built_index):
    """Reports recorded before the rename list their variants under `modes`: they load, and are
    written back under `variants`."""
    store, spec, searcher = built_index
    report = evaluate_index(
        searcher,
        spec,
        QUESTIONS,
        EvaluationRequest(variants=("dense", "bm25"), k=2, dataset="tiny", n_resamples=50),
    )
    old = report.as_dict()
    old["modes"] = old.pop("variants")
    with store.connection() as conn:
        conn.execute(
            "INSERT INTO evaluations (index_name, dataset, report) VALUES (%s, %s, %s)",
            (spec.name, "tiny", Jsonb(old)),
        )
    (loaded,) = latest_reports(store, [spec.name])
    assert loaded == report and loaded.variants == ["dense", "bm25"]
    assert "modes" not in loaded.as_dict() and loaded.as_dict()["variants"] == ["dense", "bm25"]
    assert [row.variant for row in leaderboard([loaded]).rows] == [
        row.variant for row in leaderboard([report]).rows
    ]


def test_eval_variant_flag_keeps_mode_as_its_alias():
    """`chunkyard eval --variant` is the flag; `--mode`, which older commands use, still means the same."""
    from chunkyard.pipeline.benchmark.cli import build_parser

    args = build_parser().parse_args(["--mode", "dense", "--variant", "hybrid+rerank", "--mode", "served"])
    assert args.variants == ["dense", "hybrid+rerank", "served"]
    assert "--mode is an alias" in build_parser().format_help()


def test_evaluate_index_matches_scoring_the_search_results_directly(built_index):
    _, spec, searcher = built_index
    report = evaluate_index(
        searcher, spec, QUESTIONS, EvaluationRequest(variants=("dense",), k=2, n_resamples=100)
    )
    results = searcher.search_batch([q.text for q in QUESTIONS], spec.name, k=50, mode="dense")
    for question, retrieved in zip(QUESTIONS, results, strict=True):
        expected = score_question(question, retrieved, k=2)
        got = report.summaries["dense"].per_question[question.id]
        for name in ("hit_at_2", "mrr_at_2", "recall_at_2", "chroma_precision_at_2", "iou_at_2"):
            assert got[name] == pytest.approx(expected[name]), (question.id, name)


def test_leaderboard_outputs(built_index, tmp_path):
    store, spec, searcher = built_index
    report = evaluate_index(
        searcher,
        spec,
        QUESTIONS,
        EvaluationRequest(variants=("dense", "bm25"), k=3, n_resamples=100),
        store=store,
    )
    board = leaderboard([report], title="tiny")
    assert board.rows[0].value("recall_at_3") >= board.rows[1].value("recall_at_3")
    assert "| words-12 | bm25 |" in board.markdown()
    assert board.csv().splitlines()[0].startswith("config,index,variant")
    assert len(json.loads(board.json())["rows"]) == 2
    written = board.write(tmp_path / "eval_tiny")
    assert sorted(p.suffix for p in written) == [".csv", ".json", ".md", ".png"]
    assert (tmp_path / "eval_tiny.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parse_variant():
    assert parse_variant("dense", None) == ("dense", None)
    assert parse_variant("hybrid+rerank", None) == ("hybrid", "maxsim")
    assert parse_variant("hybrid+rerank", "cross-encoder:/m") == ("hybrid", "cross-encoder:/m")
    assert parse_variant("bm25+rerank:maxsim", None) == ("bm25", "maxsim")
    with pytest.raises(ValueError, match="expected"):
        parse_variant("dense+mmr", None)


def test_chunkyard_eval_json_and_embedding_reuse(pg_url, tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in PASSAGES.items():
        (docs / name).write_text(text, encoding="utf-8")
    eval_set = tmp_path / "tiny.yaml"
    eval_set.write_text(
        "documents: docs\nquestions:\n"
        "  - {id: a, question: 'What causes tides?', answers: [gravitational pull of the Moon]}\n"
        "  - {id: b, question: 'Why does sourdough rise?', answers: [wild yeast]}\n",
        encoding="utf-8",
    )
    argv = [
        "--dataset",
        str(eval_set),
        "--config",
        "token-256",
        "--variant",
        "dense",
        "--database-url",
        pg_url,
        "--json",
        "--no-progress",
    ]
    assert eval_main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["config"] == "token-256" and first["index"] == "eval-tiny/token-256"
    assert first["variant"] == "dense"
    assert set(first["ci95"]) >= {"recall", "precision", "iou", "hit_at_5", "mrr_at_5"}
    assert first["hit_at_5"] == 1.0
    assert eval_main([*argv, "--suggest-weight"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["embeddings_computed"] == 0  # nothing changed: nothing re-embedded
    assert 0.0 <= second["suggested_weight"]["weight"] <= 1.0
    assert second["recall"] == first["recall"]
    assert first["context_tokens_at_5"] > 0  # the top 5's cost, in cl100k unless --llm-tokenizer says
    with pytest.raises(SystemExit):
        eval_main([*argv, "--llm-tokenizer", "gpt-9"])
    assert "--llm-tokenizer: unknown 'gpt-9'" in capsys.readouterr().err
    assert (
        eval_main(["--dataset", str(eval_set), "--config", "no-such-config", "--database-url", pg_url]) == 2
    )
    assert "unknown index config" in capsys.readouterr().err


@requires_chroma
def test_chroma_general_metric_sanity_on_real_references(monkeypatch):
    monkeypatch.setenv("CHUNKYARD_DATA", str(CHROMA_DIR.parent))
    dataset = load_dataset("chroma_general")
    lengths = {d.id: len(d.text) for d in dataset.documents}
    for question in dataset.questions[::60]:
        perfect = score_question(question, question.references, k=5)
        assert perfect["recall_at_5"] == perfect["chroma_precision_at_5"] == perfect["chroma_iou_at_5"] == 1.0
        whole = score_question(question, [Span(question.corpus, 0, lengths[question.corpus])], k=5)
        assert whole["recall_at_5"] == 1.0
        expected = sum(r.length for r in question.references) / lengths[question.corpus]
        assert whole["chroma_precision_at_5"] == pytest.approx(expected)
        elsewhere = [d for d in lengths if d != question.corpus][0]
        assert score_question(question, [Span(elsewhere, 0, lengths[elsewhere])], k=5)["hit_at_5"] == 0.0


def test_suggest_fusion_weight_uses_the_searcher(built_index):
    from chunkyard.evaluation.tuning import suggest_fusion_weight

    _, spec, searcher = built_index
    suggestion = suggest_fusion_weight(searcher, spec.name, QUESTIONS, weights=(0.0, 0.5, 1.0), k=2)
    assert set(suggestion.by_weight) == {0.0, 0.5, 1.0}
    assert suggestion.weight in suggestion.by_weight
    assert suggestion.by_weight[suggestion.weight] == max(suggestion.by_weight.values())
    assert 0.0 <= suggestion.held_out <= 1.0 and len(suggestion.fold_weights) == 2
    # Weight 1 ranks by the dense score alone: the same top k as dense retrieval.
    dense = evaluate_index(
        searcher, spec, QUESTIONS, EvaluationRequest(variants=("dense",), k=2, n_resamples=50)
    )
    assert suggestion.by_weight[1.0] == pytest.approx(dense.metrics["dense"]["recall_at_2"])


def test_interrupted_benchmark_resumes_from_cached_embeddings(pg_url, tmp_path, monkeypatch, embedder):
    import chunkyard.retrieval.embedders.embedder as embedder_module
    import chunkyard.retrieval.indexing.embeddings as embeddings_module
    from chunkyard.pipeline.benchmark import BenchmarkRequest, run_benchmark

    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "indexes.yaml").write_text(
        "indexes:\n  words-8:\n    chunker: {strategy: token, size: 8, overlap: 0, tokenizer: words}\n",
        encoding="utf-8",
    )
    (configs / "collections.yaml").write_text(
        "collections:\n  resume-test:\n    dataset: resume.yaml\n    indexes: [words-8]\n", encoding="utf-8"
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    facts = [
        f"Station {i} records the river level every {i + 2} minutes near bridge {i * 7}." for i in range(12)
    ]
    (docs / "stations.md").write_text(" ".join(facts), encoding="utf-8")
    eval_set = tmp_path / "resume.yaml"
    eval_set.write_text(
        "documents: docs\nquestions:\n"
        "  - {id: a, question: 'How often does station 3 record?', answers: [every 5 minutes]}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("CHUNKYARD_CONFIGS", str(configs))
    monkeypatch.setattr(embeddings_module, "EMBED_BATCH", 4)
    monkeypatch.setattr(embedder_module, "embedder_for_config", lambda config: embedder)

    class Interrupted(RuntimeError):
        pass

    real_embed = embedder.embed
    calls = {"n": 0}

    def embed_then_crash(texts):
        calls["n"] += 1
        if calls["n"] == 3:  # two batches of 4 are cached, then the run dies
            raise Interrupted("simulated crash")
        return real_embed(texts)

    monkeypatch.setattr(embedder, "embed", embed_then_crash)
    with pytest.raises(Interrupted):
        run_benchmark(
            BenchmarkRequest(
                str(eval_set),
                configs=["words-8"],
                variants=["dense"],
                database_url=pg_url,
                show_progress=False,
            )
        )
    monkeypatch.setattr(embedder, "embed", real_embed)
    result = run_benchmark(
        BenchmarkRequest(
            str(eval_set), configs=["words-8"], variants=["dense"], database_url=pg_url, show_progress=False
        )
    )
    build = result.build_reports["eval-resume/words-8"]
    total = build["embeddings_computed"] + build["embeddings_reused"]
    assert total >= 12
    assert build["embeddings_reused"] == 8  # the two batches embedded before the crash
    assert build["embeddings_computed"] == total - 8
    assert result.reports[0].n_questions == 1 and "dense" in result.reports[0].metrics


def test_suggest_search_settings_chooses_on_one_half_and_scores_the_other(built_index):
    from chunkyard.evaluation.tuning import suggest_search_settings

    _, spec, searcher = built_index
    grid = {"weight": [0.0, 1.0], "context_weight": [0.0, 0.5]}
    suggestion = suggest_search_settings(
        searcher, spec.name, QUESTIONS, grid, k=2, report=["chroma_iou_at_2"], n_resamples=100
    )
    assert [row["settings"] for row in suggestion.by_settings] == [
        {"weight": 0.0, "context_weight": 0.0},
        {"weight": 0.0, "context_weight": 0.5},
        {"weight": 1.0, "context_weight": 0.0},
        {"weight": 1.0, "context_weight": 0.5},
    ]
    recall_of = {str(row["settings"]): row["chroma_recall_at_2"] for row in suggestion.by_settings}
    assert recall_of[str(suggestion.settings)] == max(recall_of.values())
    assert len(suggestion.fold_settings) == 2 and all(
        s in grid_combos(grid) for s in suggestion.fold_settings
    )
    assert set(suggestion.held_out) == {"chroma_recall_at_2", "chroma_iou_at_2"}
    assert suggestion.held_out["chroma_recall_at_2"].n == len(QUESTIONS)
    # dense weight 1 without context is exactly the dense ranking
    dense = evaluate_index(
        searcher, spec, QUESTIONS, EvaluationRequest(variants=("dense",), k=2, n_resamples=50)
    )
    plain_dense = suggestion.by_settings[2]
    assert plain_dense["chroma_recall_at_2"] == pytest.approx(dense.metrics["dense"]["chroma_recall_at_2"])
    # an unreachable floor falls back to the best setting overall
    floored = suggest_search_settings(
        searcher, spec.name, QUESTIONS, grid, k=2, floors={"chroma_iou_at_2": 2.0}, n_resamples=100
    )
    assert floored.settings == suggestion.settings and floored.floors == {"chroma_iou_at_2": 2.0}


def grid_combos(grid: dict) -> list[dict]:
    import itertools

    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def test_eval_cli_tune_flag(pg_url, tmp_path, capsys):
    eval_set = tmp_path / "tune.yaml"
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in PASSAGES.items():
        (docs / name).write_text(text, encoding="utf-8")
    eval_set.write_text(
        "documents: docs\nquestions:\n"
        "  - {id: a, question: 'What causes tides?', answers: [gravitational pull of the Moon]}\n"
        "  - {id: b, question: 'Why does sourdough rise?', answers: [wild yeast]}\n",
        encoding="utf-8",
    )
    argv = ["--dataset", str(eval_set), "--config", "token-256", "--mode", "hybrid_weighted"]
    argv += ["--database-url", pg_url, "--json", "--no-progress"]
    assert eval_main([*argv, "--tune", "context_weight=0,0.5", "--tune-floor", "iou_at_5=0.01"]) == 0
    record = json.loads(capsys.readouterr().out)
    tuned = record["tuned_settings"]
    assert [row["settings"] for row in tuned["by_settings"]] == [
        {"context_weight": 0},
        {"context_weight": 0.5},
    ]
    assert tuned["metric"] == "recall_at_5" and tuned["floors"] == {"iou_at_5": 0.01}
    assert eval_main([*argv, "--tune", "context_weight"]) == 2
    assert "--tune: expected NAME=VALUE" in capsys.readouterr().err
    assert eval_main([*argv, "--tune", "context_weight=2"]) == 2
    assert "context_weight: must be a number between 0 and 1" in capsys.readouterr().err


def test_eval_stops_before_the_publish_when_an_error_check_fails(pg_url, tmp_path, monkeypatch, embedder):
    """`chunkyard eval` runs the steps of `pipeline.graph`: a failed staged error-level check stops
    it with an error naming the check, and the previous version stays published."""
    import chunkyard.retrieval.embedders.embedder as embedder_module
    from chunkyard.pipeline.benchmark import BenchmarkRequest, run_benchmark
    from chunkyard.pipeline.benchmark.run import BenchmarkError
    from chunkyard.retrieval.store import Store

    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "indexes.yaml").write_text(
        "indexes:\n  words-250:\n    chunker: {strategy: token, size: 250, overlap: 0, tokenizer: words}\n",
        encoding="utf-8",
    )
    (configs / "collections.yaml").write_text(
        "collections:\n  gate-test:\n    dataset: gate.yaml\n    indexes: [words-250]\n", encoding="utf-8"
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "llama.md").write_text("The zyxomorphic llama eats hay every Tuesday.", encoding="utf-8")
    eval_set = tmp_path / "gate.yaml"
    eval_set.write_text(
        "documents: docs\nquestions:\n  - {id: a, question: 'What does the llama eat?', answers: [eats hay]}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("CHUNKYARD_CONFIGS", str(configs))
    monkeypatch.setattr(embedder_module, "embedder_for_config", lambda config: embedder)
    arguments = {
        "configs": ["words-250"],
        "variants": ["dense"],
        "database_url": pg_url,
        "show_progress": False,
    }
    first = run_benchmark(BenchmarkRequest(str(eval_set), **arguments))
    name = "eval-gate/words-250"
    published = Store(pg_url).indexes.info(name)
    assert first.reports and published is not None

    # ~800 words in one chunk: over the model's 256-token input, which the config does not allow
    (docs / "llama.md").write_text(
        "The zyxomorphic llama eats hay. " + " ".join(f"word{i} alpha beta gamma" for i in range(200)),
        encoding="utf-8",
    )
    with pytest.raises(BenchmarkError, match="within_model_token_limit"):
        run_benchmark(BenchmarkRequest(str(eval_set), **arguments))
    after = Store(pg_url).indexes.info(name)
    assert after["version"] == published["version"] and after["chunk_count"] == published["chunk_count"]
