"""Score one published index on a question set, per variant, with its cost alongside.

`evaluate_index` asks the Searcher exactly what a user would ask (same index, same options), so
the numbers describe what is served. A variant is one way of searching the index: a search mode
(`dense`, `bm25`, `hybrid`, `hybrid_weighted`, `hybrid_auto`), `<mode>+rerank` (that mode with the
index's configured reranker, default MaxSim) or `served`: exactly what `/v1/search` runs when a
request names nothing but the query (`SearchOptions()` with the index config's defaults), whatever
mode that is.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from chunkyard.evaluation.cost import ContextTokens, index_cost
from chunkyard.evaluation.datasets.types import Question
from chunkyard.evaluation.estimates import Estimate, float_or_nan, json_float
from chunkyard.evaluation.metrics import (
    DEFAULT_BUDGETS,
    FAILURE_K,
    HEADLINE_COST,
    HEADLINE_METRICS,
    QUALITY_METRICS,
    TABLE_METRICS,
    MetricSummary,
    score_questions,
)
from chunkyard.evaluation.misses import collect_misses, misses_markdown
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.settings.options import DEFAULT_MODE, LLM_TOKENIZERS, SearchOptions

if TYPE_CHECKING:
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexSpec
    from chunkyard.retrieval.store import Store

DEFAULT_VARIANTS = ("dense", "bm25", "hybrid", "served")
DEFAULT_DEPTH = 50  # results fetched per question for recall@20 and the context-budget recall
DEFAULT_RERANKER = "maxsim"
SERVED_VARIANT = "served"  # the options a request that names none gets (`SearchOptions()`), not a copy
# Version of `EvaluationReport.as_dict()`; rows recorded before it (flat metrics) have none.
REPORT_FORMAT = 1

logger = logging.getLogger(__name__)


class ReportFormatError(ValueError):
    """A stored evaluation is not a report this code reads (e.g. a flat-metrics row from before)."""


@dataclass
class EvaluationReport:
    """Quality per variant (means, CIs, per-corpus), cost of the index and query latency.

    `as_dict()` is the one stored and serialised form (`store.evaluations.record`, the eval
    `_reports.json`); `from_dict()` reads it back exactly. `notes` are the dataset loader's
    notes (answers re-located, questions skipped), recorded with the numbers they qualify. Reports
    stored before variants had their name read them under the key `modes`; both load.
    """

    index: str
    config: str
    dataset: str
    k: int
    variants: list[str]
    n_questions: int
    summaries: dict[str, MetricSummary]
    cost: dict[str, float] = field(default_factory=dict)
    latency: dict[str, dict[str, float]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # per variant, the questions missed (hit@k = 0) with what was retrieved (`evaluation.misses`)
    misses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    missed: dict[str, int] = field(default_factory=dict)  # per variant, how many questions were missed

    @property
    def metrics(self) -> dict[str, dict[str, float]]:
        """`{variant: {metric: mean}}`."""
        return {variant: summary.means() for variant, summary in self.summaries.items()}

    def estimate(self, variant: str, metric: str) -> Estimate:
        return self.summaries[variant].overall[metric]

    def _per_variant(self, templates: Sequence[str]) -> dict[str, float]:
        budgets = self.settings.get("budgets", DEFAULT_BUDGETS)
        names = [
            t.format(k=self.k, budget=b) for t in templates for b in (budgets if "{budget}" in t else [None])
        ]
        return {
            f"{variant}/{name}": float(summary.overall[name].mean)
            for variant, summary in self.summaries.items()
            for name in names
            if name in summary.overall and math.isfinite(summary.overall[name].mean)
        }

    def headline(self) -> dict[str, float]:
        """`{variant}/{metric}` means of HEADLINE_METRICS plus `cost/chunks`: Dagster numeric metadata."""
        cost = {f"cost/{name}": float(self.cost[name]) for name in HEADLINE_COST if name in self.cost}
        return self._per_variant(HEADLINE_METRICS) | cost

    def quality(self) -> dict[str, float]:
        """`{variant}/{metric}` means of QUALITY_METRICS (higher is better): what a regression is measured on."""
        return self._per_variant(QUALITY_METRICS)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types only (NaN as None), so it goes into JSONB and back unchanged."""
        return {
            "format": REPORT_FORMAT,
            "index": self.index,
            "config": self.config,
            "dataset": self.dataset,
            "k": self.k,
            "variants": list(self.variants),
            "n_questions": self.n_questions,
            "summaries": {variant: s.as_dict() for variant, s in self.summaries.items()},
            "cost": {name: json_float(v) for name, v in self.cost.items()},
            "latency": {
                variant: {name: json_float(v) for name, v in values.items()}
                for variant, values in self.latency.items()
            },
            "settings": json.loads(json.dumps(self.settings, default=_json_default)),
            "notes": list(self.notes),
            "misses": json.loads(json.dumps(self.misses)),
            "missed": dict(self.missed),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationReport:
        """The report `as_dict()` wrote, or an older one naming its variants `modes`; ReportFormatError
        for anything else (flat metrics included)."""
        if data.get("format") != REPORT_FORMAT:
            raise ReportFormatError(
                f"evaluation report: field 'format' is {data.get('format')!r}, expected {REPORT_FORMAT} "
                f"(a record without it holds flat metrics from an older chunkyard: re-run the evaluation)"
            )
        try:
            return cls(
                index=str(data["index"]),
                config=str(data["config"]),
                dataset=str(data["dataset"]),
                k=int(data["k"]),
                variants=[str(v) for v in data["variants" if "variants" in data else "modes"]],
                n_questions=int(data["n_questions"]),
                summaries={variant: MetricSummary.from_dict(s) for variant, s in data["summaries"].items()},
                cost={name: float_or_nan(v) for name, v in data["cost"].items()},
                latency={
                    variant: {name: float_or_nan(v) for name, v in values.items()}
                    for variant, values in data["latency"].items()
                },
                settings=dict(data["settings"]),
                notes=[str(n) for n in data["notes"]],
                misses={variant: list(rows) for variant, rows in (data.get("misses") or {}).items()},
                missed={variant: int(n) for variant, n in (data.get("missed") or {}).items()},
            )
        except KeyError as exc:
            raise ReportFormatError(f"evaluation report: missing field {exc.args[0]!r}") from None

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True)

    def table_metrics(self) -> list[str]:
        names = [m.format(k=self.k) for m in TABLE_METRICS]
        present = set().union(*(s.overall for s in self.summaries.values())) if self.summaries else set()
        return [n for n in names if n in present]

    def markdown(self, max_notes: int = 10) -> str:
        """A table per variant (mean with 95% CI, in %), cost, latency, per-corpus recall, loader notes."""
        lines = [
            f"### {self.index} on {self.dataset} ({self.n_questions} questions, k={self.k})",
            "",
        ]
        names = self.table_metrics()
        lines.append("| variant | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for variant, summary in self.summaries.items():
            cells = [format_estimate(summary.overall[n]) if n in summary.overall else "–" for n in names]
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        lines.append("")
        recall_key = f"recall_at_{self.k}"
        corpora = sorted({c for s in self.summaries.values() for c in s.by_corpus})
        if corpora:
            lines.append(f"Per-corpus {recall_key} (%):")
            lines.append("")
            lines.append("| variant | " + " | ".join(corpora) + " |")
            lines.append("|---|" + "---|" * len(corpora))
            for variant, summary in self.summaries.items():
                cells = [
                    f"{100 * summary.by_corpus.get(c, {}).get(recall_key, math.nan):.1f}" for c in corpora
                ]
                lines.append(f"| {variant} | " + " | ".join(cells) + " |")
            lines.append("")
        if self.cost:
            lines.append("Cost: " + ", ".join(f"{k} {_fmt_number(v)}" for k, v in self.cost.items()))
            lines.append("")
        if self.latency:
            parts = [
                f"{variant} p50 {v['p50_ms']:.1f} ms / p95 {v['p95_ms']:.1f} ms"
                for variant, v in self.latency.items()
            ]
            lines.append("Query latency: " + "; ".join(parts))
            lines.append("")
        if self.notes:
            lines.append(f"Loader notes ({len(self.notes)}: answers re-located, questions skipped):")
            lines.append("")
            lines.extend(f"- {note}" for note in self.notes[:max_notes])
            if len(self.notes) > max_notes:
                lines.append(f"- ... and {len(self.notes) - max_notes} more (all in the report's notes)")
            lines.append("")
        return "\n".join(lines)

    def misses_markdown(self) -> str:
        """The per-question table of misses: each variant's missed questions, reference and retrieved spans."""
        return misses_markdown(self.misses, self.missed, self.k)


def format_estimate(est: Estimate, *, scale: float = 100.0, digits: int = 1) -> str:
    if est.n == 0 or math.isnan(est.mean):
        return "–"
    return f"{scale * est.mean:.{digits}f} [{scale * est.low:.{digits}f}, {scale * est.high:.{digits}f}]"


def _fmt_number(value: float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.3g}"
    return f"{int(value):,}"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def parse_variant(variant: str, default_reranker: str | None) -> tuple[str, str | None]:
    """A variant's search mode and reranker: `hybrid+rerank` -> ("hybrid", reranker name);
    `dense+rerank:maxsim` names one explicitly; `bm25` -> ("bm25", None)."""
    if "+" not in variant:
        return variant, None
    base, _, extra = variant.partition("+")
    if extra == "rerank":
        return base, default_reranker or DEFAULT_RERANKER
    if extra.startswith("rerank:"):
        return base, extra.split(":", 1)[1]
    raise ValueError(f"variant {variant!r}: expected <mode>, <mode>+rerank, <mode>+rerank:<name> or served")


def configured_reranker(rerank: Any) -> str | None:
    """The reranker an index config's `rerank` names (`maxsim`, or `{model: ...}`), or None."""
    if isinstance(rerank, dict):
        return rerank.get("model") or rerank.get("name")
    return str(rerank) if rerank else None


def variant_options(variant: str, default_reranker: str | None) -> SearchOptions:
    """The options a variant searches with: `served` sets none (what a request naming nothing runs),
    a search mode sets its mode, `<mode>+rerank` its mode and the reranker (`default_reranker` unless
    it names one)."""
    if variant == SERVED_VARIANT:
        return SearchOptions()
    mode, reranker = parse_variant(variant, default_reranker)
    return SearchOptions(mode=mode, rerank=reranker)


@dataclass(frozen=True)
class EvaluationRequest:
    """What to evaluate an index on besides its questions: the variants, k, depth and scoring settings.

    `options` are search options every variant runs with (its own mode and reranker over them; the
    `served` variant runs what a request naming nothing runs). `notes` (the dataset loader's
    `Dataset.problems`) are kept on the report; `build_seconds` goes into its cost.
    """

    variants: tuple[str, ...] = DEFAULT_VARIANTS
    k: int = 5
    depth: int = DEFAULT_DEPTH
    min_overlap: int = 1
    budgets: tuple[int, ...] = tuple(DEFAULT_BUDGETS)
    dataset: str = ""
    build_seconds: float | None = None
    n_resamples: int = 2000
    seed: int = 0
    options: SearchOptions = field(default_factory=SearchOptions)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("variants", "budgets", "notes"):  # lists from callers become tuples: hashable, frozen
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


def evaluate_index(
    searcher: Searcher,
    spec: IndexSpec | str,
    questions: Sequence[Question],
    request: EvaluationRequest,
    *,
    store: Store | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvaluationReport:
    """Evaluate `spec` (an IndexSpec, or an index name) through `searcher.search_batch`, as `request` says.

    Each variant fetches `depth` results per question (recall@20 and the context-budget recall need
    more than k); variants whose top k depends on the number requested (reranking, MMR) are also
    asked for exactly k, so hit@k and MRR@k are what a user asking for k would get. `served` is also
    asked for k with each budget as `max_context_tokens` (`trimmed_recall_{budget}`). `progress` is
    called with each variant as it starts.
    """
    variants, k, options = request.variants, request.k, request.options
    min_overlap, budgets, n_resamples, seed = (
        request.min_overlap,
        request.budgets,
        request.n_resamples,
        request.seed,
    )
    if not questions:
        raise ValueError("evaluate_index: no questions to evaluate")
    index_name = IndexName.parse(spec if isinstance(spec, str) else spec.name)
    config_name = index_name.config
    depth = max(request.depth, k, FAILURE_K)
    texts = [q.text for q in questions]
    counter = ContextTokens(request.options.llm_tokenizer or LLM_TOKENIZERS[0])
    summaries: dict[str, MetricSummary] = {}
    latency: dict[str, dict[str, float]] = {}
    kept_retrievals: dict[str, list[Any]] = {}
    for variant in variants:
        if progress:
            progress(variant)
        asked = variant_options(
            variant, configured_reranker(getattr(getattr(spec, "config", None), "rerank", None))
        )
        if variant != SERVED_VARIANT:  # served: what /v1/search runs for a body with only the query and index
            asked = asked.over(options)
        # no metric reads a hit's highlights, so an evaluation skips them (the latency columns are the
        # search without them), unless a context budget is asked: its trimming starts from them
        if asked.max_context_tokens is None:
            asked = asked.with_overrides(highlights=False)
        top_k_dependent = asked.rerank is not None or asked.mmr is not None
        started = time.perf_counter()
        deep = searcher.search_batch(texts, index_name, asked.with_overrides(k=depth))
        elapsed = time.perf_counter() - started
        if top_k_dependent:
            started = time.perf_counter()
            shallow = searcher.search_batch(texts, index_name, asked.with_overrides(k=k))
            elapsed = time.perf_counter() - started
            retrievals = [
                list(s[:k]) + [r for r in d if r.chunk_id not in {x.chunk_id for x in s[:k]}]
                for s, d in zip(shallow, deep, strict=True)
            ]
        else:
            retrievals = deep
        trimmed = {  # what a request for the served top k with each budget gets
            budget: searcher.search_batch(
                texts,
                index_name,
                SearchOptions(k=k, max_context_tokens=budget, llm_tokenizer=counter.encoding),
            )
            for budget in (budgets if variant == SERVED_VARIANT else ())
        }
        summaries[variant] = score_questions(
            questions,
            retrievals,
            k=k,
            min_overlap=min_overlap,
            token_counter=counter,
            budgets=budgets,
            n_resamples=n_resamples,
            seed=seed,
            trimmed=trimmed,
        )
        kept_retrievals[variant] = retrievals
        per_query = [r[0].timings.get("total_ms") for r in retrievals if r and getattr(r[0], "timings", None)]
        per_query = [t for t in per_query if t is not None]
        latency[variant] = {
            "mean_ms": 1000.0 * elapsed / len(texts),
            "p50_ms": float(np.percentile(per_query, 50)) if per_query else math.nan,
            "p95_ms": float(np.percentile(per_query, 95)) if per_query else math.nan,
        }
    source = store or getattr(searcher, "store", None)
    misses, missed = collect_misses(
        questions, kept_retrievals, summaries, k, getattr(source, "documents", None), index_name
    )
    cost = index_cost(source, index_name, spec)
    coarse = getattr(getattr(spec, "config", None), "coarse", None)
    if coarse:  # ambiguous questions are answered from a second index: its cost is part of the config's
        coarse_name = index_name.sibling(coarse["config"])
        coarse_cost = index_cost(source, coarse_name, spec)
        for key in ("chunks", "tokens_embedded", "index_bytes"):
            if key in coarse_cost:
                cost[f"coarse_{key}"] = coarse_cost[key]
    if request.build_seconds is not None:
        cost["indexing_seconds"] = float(request.build_seconds)
    return EvaluationReport(
        index=index_name,
        config=config_name,
        dataset=request.dataset,
        k=k,
        variants=list(variants),
        n_questions=len(questions),
        summaries=summaries,
        cost=cost,
        latency=latency,
        settings={
            "depth": depth,
            "min_overlap": min_overlap,
            "budgets": list(budgets),
            "bootstrap_resamples": n_resamples,
            "seed": seed,
            **options.given(),
            **({"served_mode": DEFAULT_MODE} if SERVED_VARIANT in variants else {}),  # the mode `served` ran
        },
        notes=list(request.notes),
        misses=misses,
        missed=missed,
    )


def latest_reports(store: Store, index_names: Sequence[str]) -> list[EvaluationReport]:
    """The latest recorded report of each index, in the order given. Indexes never evaluated are
    left out, and so are indexes whose latest record predates whole reports (flat metrics)."""
    reports = []
    for name in index_names:
        stored = store.evaluations.latest(name)
        if stored is None:
            continue
        try:
            reports.append(EvaluationReport.from_dict(stored))
        except ReportFormatError as exc:
            logger.warning("%s: latest evaluation left out (%s)", name, exc)
    return reports
