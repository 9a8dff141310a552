"""Step `evaluation`: evaluate a published index on its questions, record the report, check regressions.

`evaluate` is what both the evaluation asset and `chunkyard eval` call: one searcher, one
`evaluate_index`, one `store.evaluations.record`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from chunkyard.evaluation.datasets.types import Question
from chunkyard.evaluation.questions import collection_questions
from chunkyard.evaluation.runner import EvaluationReport, EvaluationRequest, evaluate_index, latest_reports
from chunkyard.pipeline import checks
from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.embedders.embedder import Embedder
from chunkyard.retrieval.query.searcher import Searcher
from chunkyard.retrieval.settings.config import Collection, IndexConfig, IndexSpec
from chunkyard.retrieval.settings.config_fields import EVALUATED_FIELDS
from chunkyard.retrieval.settings.options import LLM_TOKENIZERS, SearchOptions
from chunkyard.retrieval.store import Store

# Bump when this module or the evaluation it runs (`evaluation.runner`, `evaluation.metrics`, the query
# stages) changes a report.
CODE_VERSION = "2"  # 2: served trimmed_recall; the budget stage's top-result share
# The index config's fields that shape its evaluation (its code version hashes them): declared with
# the index config's fields in retrieval/settings/config.py.
SETTINGS = EVALUATED_FIELDS
EVALUATION_VARIANTS = ("dense", "bm25", "hybrid", "served")  # served: what /v1/search runs
EVALUATION_K = 5
REGRESSION_TOLERANCE = 0.01


def evaluation_variants(config: IndexConfig) -> tuple[str, ...]:
    """dense, bm25, hybrid and served; plus `hybrid+rerank` when the config names a reranker."""
    rerank = config.rerank
    named = (rerank.get("model") or rerank.get("name")) if isinstance(rerank, dict) else rerank
    return (*EVALUATION_VARIANTS, "hybrid+rerank") if named else EVALUATION_VARIANTS


def searcher_for(store: Store, embedder: Embedder, *, bm25_backend: str = "sql") -> Searcher:
    """The Searcher an evaluation queries through (the served one: same options, same scores)."""
    return Searcher(store, embedder, bm25_backend=bm25_backend)


def evaluate(
    store: Store,
    searcher: Searcher,
    spec: IndexSpec,
    questions: Sequence[Question],
    *,
    variants: Sequence[str],
    k: int,
    dataset: str,
    n_resamples: int = 2000,
    llm_tokenizer: str = LLM_TOKENIZERS[0],
    progress: Callable[[str], None] | None = None,
    cost: Mapping[str, float] | None = None,
    notes: Sequence[str] = (),
    record: bool = True,
) -> EvaluationReport:
    """Evaluate every variant on the questions; `cost` adds build figures, `notes` the dataset loader's
    notes, `llm_tokenizer` the encoding of the context-token and budget metrics; the report is
    recorded in the store (unless `record` is False)."""
    request = EvaluationRequest(
        variants=tuple(variants),
        k=k,
        dataset=dataset,
        n_resamples=n_resamples,
        notes=tuple(notes),
        options=SearchOptions(llm_tokenizer=llm_tokenizer),
    )
    report = evaluate_index(searcher, spec, list(questions), request, store=store, progress=progress)
    report.cost.update(cost or {})
    if record:
        store.evaluations.record(spec.name, report)
    return report


def evaluate_collection_index(
    store: Store,
    collection: Collection,
    spec: IndexSpec,
    embedder: Embedder,
    cost: Mapping[str, float] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> StepReport:
    """The evaluation asset's work: the collection's questions, every variant, a regression check
    against the index's previous recorded evaluation; `cost` adds build figures to the report;
    `progress(done, total)` counts the variants evaluated."""
    found = collection_questions(store, collection)
    if not found.questions:
        raise ValueError(
            f"{spec.name}: no evaluable question in {collection.eval_set or collection.dataset} "
            f"({len(found.skipped)} skipped: they refer to documents the collection no longer has)"
        )
    previous = latest_reports(store, [spec.name])
    variants = evaluation_variants(spec.config)
    started = iter(range(len(variants)))
    report = evaluate(
        store,
        searcher_for(store, embedder),
        spec,
        found.questions,
        variants=variants,
        k=EVALUATION_K,
        dataset=found.dataset,
        cost=cost,
        # called as each variant starts: the variants before it are done
        progress=(lambda variant: progress(next(started), len(variants))) if progress else None,
        notes=found.notes,  # recorded with the report
    )
    if progress:
        progress(len(variants), len(variants))
    regression = (
        checks.regression(report.quality(), previous[0].quality(), REGRESSION_TOLERANCE)
        if previous
        else checks.Check(
            "no_regression",
            True,
            {"metrics_compared": 0, "note": "first evaluation: nothing to compare"},
            severity="warn",
        )
    )
    warnings = [f"{spec.name}: {note}" for note in found.notes]
    if found.skipped:
        warnings.append(
            f"{spec.name}: {len(found.skipped)} question(s) skipped (their document is gone or their "
            f"answer text was not found): {', '.join(found.skipped[:20])}"
        )
    return StepReport(
        metadata={
            **report.headline(),
            "questions": len(found.questions),
            "questions_skipped": len(found.skipped),
            "dataset": found.dataset,
        },
        markdown={
            # the loader's notes and the skipped questions, which `chunkyard index` prints
            "notes": "\n".join(f"- {warning}" for warning in warnings),
            "headline_percent": headline_percent(report.headline()),
            "report": report.markdown(),
            "misses": report.misses_markdown(),
        },
        checks=[regression],
        warnings=warnings,
    )


def headline_percent(headline: Mapping[str, float]) -> str:
    """The headline fractions as a labelled table in percent (the numeric entries stay fractions of
    1, which the UI plots): `dense/hit_at_5 = 0.8947` reads `89.5 %` here."""
    rows: dict[str, dict[str, str]] = {}
    for key, value in headline.items():
        variant, _, metric = key.partition("/")
        if variant == "cost":
            continue
        rows.setdefault(variant, {})[metric] = f"{100 * value:.1f} %" if value == value else "-"
    metrics = list(dict.fromkeys(m for cells in rows.values() for m in cells))
    lines = ["| variant | " + " | ".join(metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    lines += [
        f"| {variant} | " + " | ".join(cells.get(m, "-") for m in metrics) + " |"
        for variant, cells in rows.items()
    ]
    return "\n".join(lines)
