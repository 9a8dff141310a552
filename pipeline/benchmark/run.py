"""`chunkyard eval`: build each index through the pipeline's steps, evaluate it, compare, write results.

    chunkyard eval --dataset chroma_general --protocol chroma [--config NAME ...] [--variant dense] [--json]

Indexes are built by the same `pipeline.steps` functions as the Dagster assets, on the real
Postgres (DATABASE_URL or the embedded default) as collection `<dataset>`: a second run reuses every embedding (cache keyed by model
and content hash), an interrupted run resumes from the embeddings already cached, and an
index whose documents and config did not change is not re-chunked.

Protocol `chroma` follows Chroma's report: the five corpora in one index, top 5 chunks, dense
retrieval unless `--variant` says otherwise, and recall/precision/IoU as their code computes them.
Protocol `full` reports every metric for every variant.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets import CHROMA_GENERAL, Dataset, load_dataset
from chunkyard.evaluation.reports import ENDPOINT_COST_COLUMNS, leaderboard
from chunkyard.evaluation.runner import DEFAULT_VARIANTS, EvaluationReport
from chunkyard.evaluation.tuning import (
    SettingsSuggestion,
    WeightSuggestion,
    suggest_fusion_weight,
    suggest_search_settings,
)
from chunkyard.pipeline.benchmark.results import PROTOCOLS, BenchmarkResult
from chunkyard.pipeline.graph import INDEX_STEPS, PUBLISH, ChecksFailed, IndexStep, run_index_steps
from chunkyard.pipeline.step_report import StepReport
from chunkyard.pipeline.steps.evaluation import evaluate, searcher_for
from chunkyard.retrieval.embedders import embedder as embedder_module
from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs, with_coarse_companions
from chunkyard.retrieval.settings.options import LLM_TOKENIZERS
from chunkyard.retrieval.store import Store


class BenchmarkError(RuntimeError):
    """The benchmark cannot run as asked (unknown config, no configs, missing data)."""


def _collection_for(dataset_arg: str, collection: str | None) -> tuple[str, tuple[str, ...]]:
    """The collection a dataset is indexed as, and the configs collections.yaml lists for it."""
    from chunkyard.retrieval.settings.config import SettingsError, load_collections

    try:
        collections = load_collections(include_benchmarks=True)  # chroma_general, enabled or not
    except SettingsError:
        collections = {}
    if collection:
        entry = collections.get(collection)
        return collection, entry.indexes if entry else ()
    for name, entry in collections.items():
        if entry.dataset == dataset_arg:
            return name, entry.indexes
    stem = Path(dataset_arg).stem.lower().replace(" ", "-")
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in stem).strip("-.") or "eval"
    return f"eval-{name}", ()


def _show_step(
    bar: Any, say: Callable[[str], None] | None = None, name: str = ""
) -> Callable[[IndexStep, dict[str, StepReport]], None]:
    """Names each index step on the config's progress bar as it starts (and to `say`, a log's line)."""

    def show(step: IndexStep, done: dict[str, StepReport]) -> None:
        if done:
            bar.update()
        staged = done["chunks"].metadata["chunks_staged"] if step.name == "embeddings" else None
        text = f"{step.name} ({staged} chunks staged)" if staged is not None else step.name
        bar.set_postfix_str(text)
        if say:
            say(f"{name}: {text}")

    return show


def _say(text: str) -> None:
    """A progress line for a log: `chunkyard eval: recursive-256: embeddings (12 chunks staged)`."""
    print(f"chunkyard eval: {text}", file=sys.stderr, flush=True)


def _evaluating(bar: Any, name: str, variant: str, say: Callable[[str], None] | None) -> None:
    bar.set_postfix_str(f"evaluating {variant}")
    if say:
        say(f"{name}: evaluating {variant}")


def collection_eval_set(name: str) -> tuple[str, list[Document] | None]:
    """`chunkyard eval --collection NAME`: the collection's dataset, or its `eval_set` with the documents
    of its folders read as indexing reads them (the same ids the eval set's `doc` names)."""
    from chunkyard.pipeline.documents import load_collection_documents
    from chunkyard.retrieval.settings.config import load_collections
    from chunkyard.retrieval.settings.project import PROJECT_FILE, project_root

    collections = load_collections(include_benchmarks=True)
    if name not in collections:
        raise BenchmarkError(
            f"--collection {name}: not in {project_root() / PROJECT_FILE}; known: {', '.join(sorted(collections))}"
        )
    collection = collections[name]
    if collection.dataset:
        return collection.dataset, None
    if not collection.eval_set:
        raise BenchmarkError(
            f"collection {name!r} has no eval_set: set `eval_set: FILE.jsonl` on it in chunkyard.yaml "
            "(or `chunkyard questions generate --set-eval`), or pass --dataset"
        )
    path = Path(collection.eval_set)
    path = path if path.is_absolute() else project_root() / path
    return str(path), load_collection_documents(collection).documents


@dataclass(frozen=True)
class BenchmarkRequest:
    """One `chunkyard eval` run: the data, the configs and variants, where results go, what to tune.

    `documents`: those an eval set's references point into (`collection_eval_set`); `tune`: setting
    -> values to try in `tune_mode` (with `tune_floors` on the reported metrics).
    """

    dataset: str = CHROMA_GENERAL
    documents: Sequence[Document] | None = None
    protocol: str = "full"
    configs: Sequence[str] | None = None
    variants: Sequence[str] | None = None
    k: int = 5
    llm_tokenizer: str = LLM_TOKENIZERS[0]  # the encoding of the context-token and budget metrics
    collection: str | None = None
    database_url: str | None = None
    output: str | Path | None = None
    duplicates: str = "first"
    squad_documents: str = "paragraphs"
    limit_questions: int | None = None
    n_resamples: int = 2000
    show_progress: bool = True
    record: bool = True
    suggest_weight: bool = False
    bm25_backend: str = "sql"
    tune: Mapping[str, list[int | float]] | None = None
    tune_mode: str = "hybrid_weighted"
    tune_floors: Mapping[str, float] | None = None


def run_benchmark(request: BenchmarkRequest) -> BenchmarkResult:
    """Build (or reuse) and evaluate every requested config of the dataset's collection."""
    protocol, dataset, k, variants = request.protocol, request.dataset, request.k, request.variants
    if protocol not in PROTOCOLS:
        raise BenchmarkError(f"protocol: expected one of {PROTOCOLS}, got {protocol!r}")
    from tqdm.auto import tqdm

    if protocol == "chroma":
        k = 5
        variants = tuple(variants or ("dense",))
    variants = tuple(variants or DEFAULT_VARIANTS)
    data: Dataset = load_dataset(
        dataset,
        documents=request.documents,
        duplicates=request.duplicates,
        squad_documents=request.squad_documents,
    )
    questions = data.questions[: request.limit_questions] if request.limit_questions else data.questions
    collection_name, listed = _collection_for(dataset, request.collection)
    all_configs = load_index_configs()
    wanted = list(request.configs or listed)
    if not wanted:
        raise BenchmarkError(
            f"no index configs to evaluate for collection {collection_name!r}: pass --config NAME "
            f"(known: {', '.join(sorted(all_configs))})"
        )
    unknown = [c for c in wanted if c not in all_configs]
    if unknown:
        raise BenchmarkError(f"unknown index config(s) {unknown}; known: {sorted(all_configs)}")

    store = Store(request.database_url)
    store.migrate()
    store.documents.sync(collection_name, data.documents, [])
    reports: list[EvaluationReport] = []
    builds: dict[str, dict[str, int | float | str]] = {}
    suggestions: dict[str, WeightSuggestion] = {}
    tuned: dict[str, SettingsSuggestion] = {}
    # bars on a terminal; a log (stderr not a terminal) gets plain lines, not `\r` redraws and escapes
    bars = request.show_progress and sys.stderr.isatty()
    say = _say if request.show_progress and not bars else None
    # a config with `coarse` answers ambiguous questions from its coarse index: build that one too
    bar = tqdm(
        with_coarse_companions(wanted, all_configs),
        desc="configs",
        unit="config",
        file=sys.stderr,
        disable=not bars,
    )
    for config_name in bar:
        config = all_configs[config_name]
        spec = IndexSpec(collection_name, config)
        embedder = embedder_module.embedder_for_config(config)
        started = time.perf_counter()
        steps = tqdm(
            total=len(INDEX_STEPS) + 1,  # the index steps, then the evaluation
            desc=f"{config_name}",
            unit="step",
            file=sys.stderr,
            leave=False,
            disable=not bars,
        )
        try:
            built = run_index_steps(store, spec, embedder, before=_show_step(steps, say, config_name))
        except ChecksFailed as exc:
            steps.close()
            store.close()
            raise BenchmarkError(str(exc)) from exc
        steps.update()
        chunked, embedded, published = built["chunks"], built["embeddings"], built[PUBLISH]
        build_seconds = time.perf_counter() - started
        builds[spec.name] = {
            **chunked.metadata,
            **embedded.metadata,
            **published.metadata,
            "build_seconds": build_seconds,
        }
        warned = [c.name for r in built.values() for c in r.checks if not c.passed]
        if warned:
            print(f"chunkyard eval: {spec.name}: checks warned: {', '.join(warned)}", file=sys.stderr)
        if config_name not in wanted:
            steps.close()
            continue
        steps.set_postfix_str(f"evaluating {len(questions)} questions")
        searcher = searcher_for(store, embedder, bm25_backend=request.bm25_backend)
        report = evaluate(
            store,
            searcher,
            spec,
            questions,
            variants=variants,
            k=k,
            dataset=data.name,
            n_resamples=request.n_resamples,
            llm_tokenizer=request.llm_tokenizer,
            progress=lambda variant, bar=steps, name=config_name: _evaluating(bar, name, variant, say),
            cost={
                "embeddings_computed": float(embedded.metadata["embeddings_computed"]),
                "embeddings_reused": float(embedded.metadata["embeddings_reused"]),
                "build_seconds": round(build_seconds, 2),
                # the model's speed where this run embedded anything (cached vectors cost nothing)
                **(
                    {"embeddings_per_second": float(embedded.metadata["embeddings_per_second"])}
                    if embedded.metadata["embeddings_computed"]
                    else {}
                ),
                # an embedding server's usage by this build (tokens it counted, requests, retries, seconds)
                **{
                    key: float(value)
                    for key, value in embedded.metadata.items()
                    if key in ENDPOINT_COST_COLUMNS
                },
            },
            notes=data.problems,
            record=request.record,
        )
        steps.update()
        steps.close()
        reports.append(report)
        if request.suggest_weight:
            steps.set_postfix_str("suggesting the fusion weight")
            suggestions[spec.name] = suggest_fusion_weight(searcher, spec.name, questions, k=k)
        if request.tune:
            tuned[spec.name] = suggest_search_settings(
                searcher,
                spec.name,
                questions,
                request.tune,
                mode=request.tune_mode,
                k=k,
                metric=f"chroma_recall_at_{k}" if protocol == "chroma" else f"recall_at_{k}",
                report=[f"chroma_iou_at_{k}", f"hit_at_{k}", f"mrr_at_{k}"],
                floors=request.tune_floors,
                n_resamples=request.n_resamples,
            )
    bar.close()
    title = f"{data.name}: protocol {protocol}"
    notes = []
    if protocol == "chroma":
        notes.append(
            "Protocol chroma: all corpora in one index, top 5, recall/precision/IoU as Chroma's code "
            "computes them (precision and IoU add up every retrieved chunk's length: overlaps count twice)."
        )
    if data.problems:
        notes.append(
            f"Dataset loader: {len(data.problems)} note(s) (answers re-located, questions skipped); "
            f"listed on stderr and in each report's `notes`."
        )
    sort_by = f"chroma_recall_at_{k}" if protocol == "chroma" else f"recall_at_{k}"
    board = leaderboard(reports, sort_by=sort_by, title=title, notes=notes)
    result = BenchmarkResult(
        data.name, protocol, collection_name, k, reports, board, builds, [], suggestions, tuned
    )
    if request.output:
        result.written = board.write(request.output)
        Path(str(request.output) + ".md").write_text(result.markdown(), encoding="utf-8")
        details = Path(str(request.output) + "_reports.json")
        details.write_text(
            json.dumps([r.as_dict() for r in reports], indent=1, default=_json_default), encoding="utf-8"
        )
        result.written.append(details)
    store.close()
    return result


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(type(obj).__name__)
