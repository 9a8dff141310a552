"""`chunkyard eval`: build each index through the pipeline's steps, evaluate it, compare, write results.

    chunkyard eval --dataset chroma_general --protocol chroma [--config NAME ...] [--mode dense] [--json]

Indexes are built by the same `pipeline.steps` functions as the Dagster assets, on the real
Postgres (DATABASE_URL or the embedded default) as collection `<dataset>`: a second run reuses every embedding (cache keyed by model
and content hash), an interrupted run resumes from the embeddings already cached, and an
index whose documents and config did not change is not re-chunked.

Protocol `chroma` follows Chroma's report: the five corpora in one index, top 5 chunks, dense
retrieval unless `--mode` says otherwise, and recall/precision/IoU as their code computes them.
Protocol `full` reports every metric for every mode.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import retrieval.embedder
from evaluation.datasets import CHROMA_GENERAL, Dataset, DatasetError, load_dataset
from evaluation.reports import leaderboard
from evaluation.runner import DEFAULT_MODES, EvaluationReport
from pipeline.benchmark_results import PROTOCOLS, BenchmarkResult
from pipeline.steps.bm25 import index_terms
from pipeline.steps.chunks import chunk
from pipeline.steps.embeddings import embed
from pipeline.steps.evaluation import evaluate, searcher_for
from pipeline.steps.index import publish_index
from retrieval.config import IndexSpec, load_index_configs, with_coarse_companions
from retrieval.store import Store


class BenchmarkError(RuntimeError):
    """The benchmark cannot run as asked (unknown config, no configs, missing data)."""


def _collection_for(dataset_arg: str, collection: str | None) -> tuple[str, tuple[str, ...]]:
    """The collection a dataset is indexed as, and the configs collections.yaml lists for it."""
    from retrieval.config import ConfigError, load_collection_configs

    try:
        collections = load_collection_configs()
    except ConfigError:
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


def run_benchmark(
    dataset: str = CHROMA_GENERAL,
    *,
    protocol: str = "full",
    configs: Sequence[str] | None = None,
    modes: Sequence[str] | None = None,
    k: int = 5,
    collection: str | None = None,
    database_url: str | None = None,
    output: str | Path | None = None,
    duplicates: str = "first",
    squad_documents: str = "paragraphs",
    limit_questions: int | None = None,
    n_resamples: int = 2000,
    show_progress: bool = True,
    record: bool = True,
    suggest_weight: bool = False,
    bm25_backend: str = "sql",
    tune: dict[str, list[Any]] | None = None,
    tune_mode: str = "hybrid_weighted",
    tune_floors: dict[str, float] | None = None,
) -> BenchmarkResult:
    """Build (or reuse) and evaluate every requested config of the dataset's collection."""
    if protocol not in PROTOCOLS:
        raise BenchmarkError(f"protocol: expected one of {PROTOCOLS}, got {protocol!r}")
    from tqdm.auto import tqdm

    if protocol == "chroma":
        k = 5
        modes = tuple(modes or ("dense",))
    modes = tuple(modes or DEFAULT_MODES)
    data: Dataset = load_dataset(dataset, duplicates=duplicates, squad_documents=squad_documents)
    questions = data.questions[:limit_questions] if limit_questions else data.questions
    collection_name, listed = _collection_for(dataset, collection)
    all_configs = load_index_configs()
    wanted = list(configs or listed)
    if not wanted:
        raise BenchmarkError(
            f"no index configs to evaluate for collection {collection_name!r}: pass --config NAME "
            f"(known: {', '.join(sorted(all_configs))})"
        )
    unknown = [c for c in wanted if c not in all_configs]
    if unknown:
        raise BenchmarkError(f"unknown index config(s) {unknown}; known: {sorted(all_configs)}")

    store = Store(database_url)
    store.migrate()
    store.sync_documents(collection_name, data.documents, [])
    reports: list[EvaluationReport] = []
    builds: dict[str, dict[str, Any]] = {}
    suggestions: dict[str, Any] = {}
    tuned: dict[str, Any] = {}
    # a config with `coarse` answers ambiguous questions from its coarse index: build that one too
    bar = tqdm(
        with_coarse_companions(wanted, all_configs),
        desc="configs",
        unit="config",
        file=sys.stderr,
        disable=not show_progress,
    )
    for config_name in bar:
        config = all_configs[config_name]
        spec = IndexSpec(collection_name, config)
        embedder = retrieval.embedder.embedder_for_config(config)
        started = time.perf_counter()
        steps = tqdm(
            total=5,
            desc=f"{config_name}",
            unit="step",
            file=sys.stderr,
            leave=False,
            disable=not show_progress,
        )
        steps.set_postfix_str("chunks")
        chunked = chunk(store, spec, embedder)
        steps.update()
        steps.set_postfix_str(f"embeddings ({chunked.metadata['chunks_staged']} chunks staged)")
        embedded = embed(store, spec, embedder)
        steps.update()
        steps.set_postfix_str("bm25")
        index_terms(store, spec)
        steps.update()
        steps.set_postfix_str("publish")
        published = publish_index(store, spec)
        steps.update()
        build_seconds = time.perf_counter() - started
        builds[spec.name] = {
            **chunked.metadata,
            **embedded.metadata,
            **published.metadata,
            "build_seconds": build_seconds,
        }
        failed = [c.name for r in (chunked, embedded, published) for c in r.checks if not c.passed]
        if failed:
            print(f"chunkyard eval: {spec.name}: checks failed: {', '.join(failed)}", file=sys.stderr)
        if config_name not in wanted:
            steps.close()
            continue
        steps.set_postfix_str(f"evaluating {len(questions)} questions")
        searcher = searcher_for(store, embedder, bm25_backend=bm25_backend)
        report = evaluate(
            store,
            searcher,
            spec,
            questions,
            modes=modes,
            k=k,
            dataset=data.name,
            n_resamples=n_resamples,
            progress=lambda mode, bar=steps: bar.set_postfix_str(f"evaluating {mode}"),
            cost={
                "embeddings_computed": float(embedded.metadata["embeddings_computed"]),
                "embeddings_reused": float(embedded.metadata["embeddings_reused"]),
                "build_seconds": round(build_seconds, 2),
            },
            notes=data.problems,
            record=record,
        )
        steps.update()
        steps.close()
        reports.append(report)
        if suggest_weight:
            from evaluation.tuning import suggest_fusion_weight

            steps.set_postfix_str("suggesting the fusion weight")
            suggestions[spec.name] = suggest_fusion_weight(searcher, spec.name, questions, k=k)
        if tune:
            from evaluation.tuning import suggest_search_settings

            tuned[spec.name] = suggest_search_settings(
                searcher,
                spec.name,
                questions,
                tune,
                mode=tune_mode,
                k=k,
                metric=f"chroma_recall_at_{k}" if protocol == "chroma" else f"recall_at_{k}",
                report=[f"chroma_iou_at_{k}", f"hit_at_{k}", f"mrr_at_{k}"],
                floors=tune_floors,
                n_resamples=n_resamples,
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
    if output:
        result.written = board.write(output)
        Path(str(output) + ".md").write_text(result.markdown(), encoding="utf-8")
        details = Path(str(output) + "_reports.json")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkyard eval", description="Build and evaluate index configs on an evaluation dataset."
    )
    parser.add_argument(
        "--dataset",
        default=CHROMA_GENERAL,
        help="chroma_general, a SQuAD .json, or a .jsonl/.yaml eval set (default: %(default)s)",
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="full",
        help="chroma: the report's setup (top 5, dense, its metrics); full: every metric",
    )
    parser.add_argument(
        "--config",
        action="append",
        dest="configs",
        metavar="NAME",
        help="index config to evaluate (repeatable; default: the collection's list)",
    )
    parser.add_argument(
        "--mode",
        action="append",
        dest="modes",
        metavar="MODE",
        help="dense, bm25, hybrid, hybrid_weighted, or <mode>+rerank (repeatable)",
    )
    parser.add_argument("--k", type=int, default=5, help="top k (protocol chroma: always 5)")
    parser.add_argument("--collection", help="collection name to index the dataset as")
    parser.add_argument("--database-url", help="Postgres URL (default: DATABASE_URL or the embedded one)")
    parser.add_argument(
        "--output",
        metavar="PREFIX",
        help="write PREFIX.md/.csv/.json/.png (default without --json: "
        "benchmarks/results/eval_<dataset>_<protocol>)",
    )
    parser.add_argument(
        "--duplicates",
        choices=("first", "alternatives"),
        default="first",
        help="chroma_general: repeated reference passages count only where published "
        "(first) or at every occurrence (alternatives)",
    )
    parser.add_argument("--squad-documents", choices=("paragraphs", "articles"), default="paragraphs")
    parser.add_argument("--limit-questions", type=int, help="evaluate only the first N questions")
    parser.add_argument(
        "--bm25-backend",
        choices=("sql", "memory"),
        default="sql",
        help="Searcher BM25 scorer: postings in Postgres (the served default) or its in-memory copy "
        "(same scores, faster for long evaluations)",
    )
    parser.add_argument(
        "--suggest-weight",
        action="store_true",
        help="also score hybrid_weighted at dense weights 0..1 and suggest one (2-fold held out)",
    )
    parser.add_argument(
        "--tune",
        action="append",
        metavar="OPTION=V1,V2,...",
        help="Searcher option and values to try (repeatable; every combination is scored, the best "
        "chosen on one half of the questions and reported on the other), e.g. context_weight=0,0.3,0.5",
    )
    parser.add_argument("--tune-mode", default="hybrid_weighted", help="search mode for --tune")
    parser.add_argument(
        "--tune-floor",
        action="append",
        metavar="METRIC=VALUE",
        help="only choose settings reaching this mean on the tuning half, e.g. chroma_iou_at_5=0.08",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    return parser


def _default_output(dataset: str, protocol: str) -> Path:
    from retrieval.config import project_root

    name = "chroma" if dataset == CHROMA_GENERAL and protocol == "chroma" else Path(dataset).stem
    suffix = "" if protocol == "chroma" else f"_{protocol}"
    return project_root() / "benchmarks" / "results" / f"eval_{name}{suffix}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of `chunkyard eval`; returns the process exit code."""
    args = build_parser().parse_args(argv)
    output = args.output
    if output is None and not args.json and not args.configs and not args.limit_questions:
        output = _default_output(args.dataset, args.protocol)
    try:
        result = run_benchmark(
            args.dataset,
            protocol=args.protocol,
            configs=args.configs,
            modes=args.modes,
            k=args.k,
            collection=args.collection,
            database_url=args.database_url,
            output=output,
            duplicates=args.duplicates,
            squad_documents=args.squad_documents,
            limit_questions=args.limit_questions,
            show_progress=not args.no_progress,
            suggest_weight=args.suggest_weight,
            bm25_backend=args.bm25_backend,
            tune=_parse_assignments(args.tune, "--tune", many=True),
            tune_mode=args.tune_mode,
            tune_floors=_parse_assignments(args.tune_floor, "--tune-floor", many=False),
        )
    except (BenchmarkError, DatasetError, ValueError) as exc:
        print(f"chunkyard eval: error: {exc}", file=sys.stderr)
        return 2
    for note in result.reports[0].notes if result.reports else ():
        print(f"chunkyard eval: dataset note: {note}", file=sys.stderr)
    records = result.summary_records()
    if args.json:
        payload: dict[str, Any] = (
            records[0]
            if len(records) == 1
            else {
                "dataset": result.dataset,
                "protocol": result.protocol,
                "k": result.k,
                "results": records,
            }
        )
        print(json.dumps(payload, sort_keys=False, default=_nan_to_none))
    else:
        print(result.markdown())
        for path in result.written:
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _parse_assignments(items: list[str] | None, flag: str, *, many: bool) -> dict[str, Any] | None:
    """`["context_weight=0,0.3"]` -> `{"context_weight": [0, 0.3]}` (`many=False`: one number each)."""
    if not items:
        return None
    parsed: dict[str, Any] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise BenchmarkError(f"{flag}: expected NAME=VALUE{',...' if many else ''}, got {item!r}")
        try:
            numbers = [_number(v) for v in values.split(",")]
        except ValueError as exc:
            raise BenchmarkError(f"{flag} {name}: values must be numbers, got {values!r}") from exc
        if not many and len(numbers) != 1:
            raise BenchmarkError(f"{flag} {name}: expected one value, got {values!r}")
        parsed[name.strip()] = numbers if many else numbers[0]
    return parsed


def _number(text: str) -> int | float:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else float(text)


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


if __name__ == "__main__":
    raise SystemExit(main())
