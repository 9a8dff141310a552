"""Promotion: the leaderboard's winner within budget served by an alias; a regression blocks the swap."""

from __future__ import annotations

import math
import threading
import time
import uuid

import pytest
from chunkyard.assets.evaluation import build_promotion_asset
from chunkyard.assets.keys import promotion_key
from chunkyard.assets.resources import PostgresResource
from chunkyard.chunking.types import Document
from chunkyard.evaluation.estimates import Estimate
from chunkyard.evaluation.reports import Leaderboard, LeaderboardRow
from chunkyard.evaluation.runner import EvaluationRequest, evaluate_index
from chunkyard.pipeline.graph import build_index
from chunkyard.pipeline.steps.promotion import decide, promote
from chunkyard.retrieval.query import Searcher, aliases
from chunkyard.retrieval.settings.config import Collection, SettingsError
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.settings.options import DEFAULT_MODE, SearchOptions
from chunkyard.retrieval.settings.promotion_policy import PromotionPolicy, read_promotion_policy
from dagster import DagsterInstance, materialize

from tests.test_evaluation import PASSAGES, QUESTIONS
from tests.test_indexing_support import ParagraphChunker, make_spec


def _row(
    index: str, variant: str, recall: float, p95: float = 10.0, tokens: float = 500.0, chunks: float = 100
):
    return LeaderboardRow(
        config=IndexName.parse(index).config,
        index=index,
        variant=variant,
        dataset="d",
        k=5,
        n_questions=10,
        estimates={
            "recall_at_5": Estimate(recall, recall, recall, 10),
            "context_tokens_at_5": Estimate(tokens, tokens, tokens, 10),
        },
        cost={"chunks": chunks},
        latency={"p95_ms": p95},
    )


def _target(index: str, mode: str, scores: dict[str, float] | None = None) -> aliases.AliasTarget:
    return aliases.AliasTarget(
        "docs", 1, IndexName.parse(index), 1, SearchOptions(mode=mode), scores=scores or {}
    )


BOARD = Leaderboard(
    [
        _row("c/big", "hybrid_weighted", 0.95, p95=80.0),
        _row("c/mid", "bm25", 0.90, tokens=900.0),
        _row("c/mid", "dense", 0.85),
        _row("c/small", "hybrid", 0.80, chunks=20),
    ],
    k=5,
)


def test_the_winner_is_the_best_row_within_every_budget() -> None:
    policy = PromotionPolicy("docs", budget={"p95_ms": 50, "context_tokens": 800, "chunks": 200})
    decision = decide(BOARD, policy, None)
    assert (decision.winner.index, decision.winner.variant, decision.winner_value) == ("c/mid", "dense", 0.85)
    assert decision.over_budget == {
        "c/big hybrid_weighted": "p95_ms: 80 > 50",
        "c/mid bm25": "context_tokens: 900 > 800",
    }
    assert not decision.blocked
    # no budget: the best row overall; an unmeasured budget key rules a row out
    assert decide(BOARD, PromotionPolicy("docs"), None).winner.index == "c/big"
    assert decide(BOARD, PromotionPolicy("docs", budget={"index_bytes": 1e9}), None).winner is None


def test_a_regression_against_the_current_target_blocks_the_promotion() -> None:
    tight = PromotionPolicy("docs", budget={"p95_ms": 50, "context_tokens": 800}, max_regression=0.02)
    # the current target (c/big) left the budget: its best replacement scores 0.10 lower -> blocked
    blocked = decide(BOARD, tight, _target("c/big", "hybrid_weighted"))
    assert blocked.blocked and blocked.current_value == 0.95
    assert not decide(
        BOARD, PromotionPolicy("docs", max_regression=0.2), _target("c/big", "hybrid_weighted")
    ).blocked
    # a current target not on the board is compared by what it scored when it was pinned
    pinned = decide(BOARD, tight, _target("other/x", "bm25", {"recall_at_5": 0.86}))
    assert not pinned.blocked and pinned.current_value == 0.86
    assert decide(BOARD, tight, _target("other/x", "bm25", {"recall_at_5": 0.99})).blocked
    assert math.isnan(decide(BOARD, tight, _target("other/x", "bm25")).current_value)


def test_promotion_policy_is_validated_with_the_field_named() -> None:
    assert read_promotion_policy({"alias": "docs", "budget": {"p95_ms": 40}}, "c").budget == {"p95_ms": 40.0}
    for raw, field in (
        ({"budget": {}}, "c.serve"),
        ({"alias": "Docs/x"}, "c.serve.alias"),
        ({"alias": "docs", "budget": {"latency": 3}}, "c.serve.budget"),
        ({"alias": "docs", "budget": {"p95_ms": -1}}, "c.serve.budget.p95_ms"),
        ({"alias": "docs", "max_regression": 2}, "c.serve.max_regression"),
        ({"alias": "docs", "keep": 0}, "c.serve.keep"),
    ):
        with pytest.raises(SettingsError, match=field.replace(".", r"\.")):
            read_promotion_policy(raw, "c")


@pytest.fixture(scope="module")
def evaluated(store, embedder):
    """Two indexes of one collection, each evaluated (bm25, dense) and recorded."""
    collection = f"c{uuid.uuid4().hex[:10]}"
    docs = [Document(doc_id, text) for doc_id, text in PASSAGES.items()]
    store.documents.sync(collection, docs, [])
    searcher = Searcher(store, embedder)
    specs = [make_spec(collection, "para-a"), make_spec(collection, "para-b", bm25={"analyzer": "english"})]
    for spec in specs:
        build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
        report = evaluate_index(
            searcher,
            spec,
            QUESTIONS,
            EvaluationRequest(variants=("bm25", "dense"), k=5, dataset="tiny", n_resamples=20),
            store=store,
        )
        store.evaluations.record(spec.name, report)
    return collection, specs, searcher


def test_promote_serves_the_winner_and_keeps_it_when_nothing_changed(store, evaluated) -> None:
    collection, specs, searcher = evaluated
    policy = PromotionPolicy(f"docs-{uuid.uuid4().hex[:6]}", budget={"context_tokens": 10_000})
    report = promote(store, collection, [s.name for s in specs], policy)
    assert report.metadata["promoted"] is True
    assert {c.name: c.passed for c in report.checks} == {"no_regression": True, "within_budget": True}
    target = aliases.get_alias(store, policy.alias)
    assert f"{target.index} {target.options.mode}" == report.metadata["winner"]
    assert target.scores == {"recall_at_5": report.metadata["winner_value"]}
    assert searcher.search("What causes tides?", policy.alias)[0].index == target.index
    again = promote(store, collection, [s.name for s in specs], policy)
    assert again.metadata["generation"] == target.generation  # same winner, same version: no new target


def test_the_promotion_asset_materializes_with_its_checks(store, evaluated, pg_url) -> None:
    collection, specs, _ = evaluated
    alias = f"docs-{uuid.uuid4().hex[:6]}"
    declared = Collection(
        collection, folders=("x",), indexes=("para-a", "para-b"), serve=PromotionPolicy(alias)
    )
    asset = build_promotion_asset(declared, specs)
    result = materialize(
        [asset], instance=DagsterInstance.ephemeral(), resources={"postgres": PostgresResource(url=pg_url)}
    )
    assert result.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"no_regression": True, "within_budget": True}
    assert asset.key == promotion_key(collection)
    assert aliases.get_alias(store, alias) is not None


def test_readers_see_no_error_while_promotions_swap_the_alias(store, evaluated) -> None:
    """A loop of queries on the alias while the promotion step re-points it again and again (after each,
    an operator pins the other index): 0 errors, every answer from one index version."""
    collection, specs, searcher = evaluated
    policy = PromotionPolicy(f"docs-{uuid.uuid4().hex[:6]}")
    promote(store, collection, [s.name for s in specs], policy)
    errors: list[BaseException] = []
    mixed: list[list[tuple[str, int]]] = []
    answered = [0]
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                got = [
                    (r.index, r.index_version) for r in searcher.search("What causes tides?", policy.alias)
                ]
            except BaseException as exc:  # noqa: BLE001 - every failure counts
                errors.append(exc)
                continue
            answered[0] += 1
            if len(set(got)) != 1:
                mixed.append(got)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    promoted = 0
    try:
        for _ in range(8):
            winner = aliases.get_alias(store, policy.alias)
            other = next(s.name for s in specs if s.name != winner.index)
            aliases.set_alias(store, policy.alias, other, {"mode": "bm25"}, note="operator")
            report = promote(store, collection, [s.name for s in specs], policy)
            promoted += bool(report.metadata["promoted"])
            time.sleep(0.02)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert errors == [] and mixed == []
    assert promoted == 8 and answered[0] > 8


def test_a_collection_with_serve_gets_a_promotion_asset(tmp_path) -> None:
    from chunkyard.assets.definitions import build_collection_assets
    from chunkyard.retrieval.settings.config import load_collections
    from chunkyard.retrieval.settings.config_checks import load_index_specs

    path = tmp_path / "collections.yaml"
    path.write_text(
        "collections:\n"
        " docs:\n  folders: [d]\n  eval_set: q.jsonl\n  indexes: [recursive-256]\n"
        "  serve: {alias: docs, budget: {p95_ms: 50, chunks: 1000}, keep: 3}\n"
        " plain:\n  folders: [d]\n  eval_set: q.jsonl\n  indexes: [recursive-256]\n"
    )
    collections = load_collections(path)
    assert collections["docs"].serve == PromotionPolicy("docs", {"p95_ms": 50.0, "chunks": 1000.0}, keep=3)
    assert collections["plain"].serve is None
    specs = load_index_specs(None, path)
    keys = {
        name: build_collection_assets(c, [s for s in specs if s.collection == name]).keys
        for name, c in collections.items()
    }
    assert promotion_key("docs") in keys["docs"] and promotion_key("plain") not in keys["plain"]
    path.write_text("collections:\n docs:\n  folders: [d]\n  serve: {alias: docs, budget: {p99_ms: 3}}\n")
    with pytest.raises(SettingsError, match=r"collections\.docs\.serve\.budget"):
        load_collections(path)


def test_a_served_or_reranked_winner_is_pinned_with_the_options_it_was_evaluated_with(
    store, embedder
) -> None:
    """Leaderboard rows are variants: a `served` winner pins what a request naming nothing runs (the
    default mode), a `<mode>+rerank` winner its mode and reranker; neither is a mode to pin as it is."""
    collection = f"c{uuid.uuid4().hex[:10]}"
    store.documents.sync(collection, [Document(d, t) for d, t in PASSAGES.items()], [])
    spec = make_spec(collection, "para-a")
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    searcher = Searcher(store, embedder)
    for variant, pinned in (
        ("served", SearchOptions(mode=DEFAULT_MODE)),
        ("dense+rerank", SearchOptions(mode="dense", rerank="maxsim")),
    ):
        request = EvaluationRequest(variants=(variant,), k=5, dataset="tiny", n_resamples=20)
        store.evaluations.record(spec.name, evaluate_index(searcher, spec, QUESTIONS, request, store=store))
        policy = PromotionPolicy(f"docs-{uuid.uuid4().hex[:6]}")
        report = promote(store, collection, [spec.name], policy)
        assert report.metadata["promoted"] is True and report.metadata["winner"] == f"{spec.name} {variant}"
        assert aliases.get_alias(store, policy.alias).options == pinned
        assert searcher.search("What causes tides?", policy.alias)[0].index == spec.name
        again = promote(store, collection, [spec.name], policy)  # same winner, same version: no new target
        assert again.metadata["generation"] == report.metadata["generation"]
