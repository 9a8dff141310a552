"""`chunkyard eval`: build each index through the real pipeline, evaluate it, compare, write results.

    chunkyard eval --dataset chroma_general --protocol chroma [--config NAME ...] [--mode dense] [--json]

Indexes are built with `retrieval.indexing` on the real Postgres (DATABASE_URL or the embedded
default) as collection `<dataset>`: a second run reuses every embedding (cache keyed by model
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.datasets import CHROMA_GENERAL, Dataset, DatasetError, load_dataset
from evaluation.reports import Leaderboard, leaderboard
from evaluation.runner import DEFAULT_MODES, EvaluationReport, evaluate_index

PROTOCOLS = ("chroma", "full")
# What `--json` reports for protocol chroma: output key -> metric name (k substituted).
CHROMA_KEYS = {
    "recall": "chroma_recall_at_{k}",
    "precision": "chroma_precision_at_{k}",
    "iou": "chroma_iou_at_{k}",
    "hit_at_{k}": "hit_at_{k}",
    "mrr_at_{k}": "mrr_at_{k}",
}
FULL_KEYS = {
    "recall": "recall_at_{k}",
    "precision": "precision_at_{k}",
    "iou": "iou_at_{k}",
    "chroma_precision": "chroma_precision_at_{k}",
    "chroma_iou": "chroma_iou_at_{k}",
    "hit_at_{k}": "hit_at_{k}",
    "mrr_at_{k}": "mrr_at_{k}",
    "recall_at_20": "recall_at_20",
    "budget_recall_1024": "budget_recall_1024",
    "budget_recall_2048": "budget_recall_2048",
}


# Chroma's report, all-MiniLM-L6-v2 rows (recall, precision, IoU in %), for the reproduction table.
PUBLISHED_MINILM = {
    "chroma-token-250-125": (82.4, 3.6, 3.5),
    "chroma-token-250-0": (77.1, 3.3, 3.3),
    "chroma-token-200-0": (76.6, 4.1, 4.1),
    "chroma-recursive-250-125": (78.7, 4.9, 4.9),
    "chroma-recursive-250-0": (78.5, 5.4, 5.4),
    "chroma-recursive-200-0": (75.7, 6.5, 6.5),
    "chroma-cluster-250": (77.3, 6.1, 6.0),
    "chroma-cluster-200": (75.2, 7.2, 7.2),
}
# The report's best figures with any model (text-embedding-3-large): the bar to beat.
PUBLISHED_BEST = {"recall": 91.9, "iou": 8.0}


class BenchmarkError(RuntimeError):
    """The benchmark cannot run as asked (unknown config, no configs, missing data)."""


@dataclass
class BenchmarkResult:
    dataset: str
    protocol: str
    collection: str
    k: int
    reports: list[EvaluationReport]
    board: Leaderboard
    build_reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    weight_suggestions: dict[str, Any] = field(default_factory=dict)
    settings_suggestions: dict[str, Any] = field(default_factory=dict)

    def reproduction_markdown(self) -> str:
        """Our dense rows next to the report's all-MiniLM-L6-v2 rows (protocol chroma metrics)."""
        rows = []
        for report in self.reports:
            published = PUBLISHED_MINILM.get(report.config)
            summary = report.summaries.get("dense")
            if published is None or summary is None:
                continue
            est = {n: summary.overall[f"chroma_{n}_at_5"] for n in ("recall", "precision", "iou")}
            rows.append(
                f"| {report.config} | {_pct(est['recall'])} | {published[0]:.1f} | "
                f"{100 * est['recall'].mean - published[0]:+.1f} | {_pct(est['precision'])} | {published[1]:.1f} | "
                f"{_pct(est['iou'])} | {published[2]:.1f} |"
            )
        if not rows:
            return ""
        header = [
            "## Reproduction of Chroma's all-MiniLM-L6-v2 rows (dense, top 5)",
            "",
            "| config | recall (ours, 95% CI) | published | Δ recall | precision (ours) | published | "
            "IoU (ours) | published |",
            "|---|---|---|---|---|---|---|---|",
        ]
        return "\n".join(header + rows) + "\n"

    def weights_markdown(self) -> str:
        if not self.weight_suggestions:
            return ""
        lines = [
            f"## Suggested `hybrid_weighted` dense weight (recall@{self.k}; 2-fold held-out)",
            "",
            "| index | best weight | recall at best | held-out recall | weights chosen per fold | recall by weight |",
            "|---|---|---|---|---|---|",
        ]
        for index, sug in self.weight_suggestions.items():
            by_weight = ", ".join(f"{w:g}: {100 * v:.1f}" for w, v in sug.by_weight.items())
            lines.append(
                f"| {index} | {sug.weight:g} | {100 * sug.by_weight[sug.weight]:.1f} | {100 * sug.held_out:.1f} | "
                f"{', '.join(f'{w:g}' for w in sug.fold_weights)} | {by_weight} |"
            )
        return "\n".join(lines) + "\n"

    def settings_markdown(self) -> str:
        """`--tune` grids: every combination on all questions, and the 2-fold held-out choice."""
        lines = []
        for index, sug in self.settings_suggestions.items():
            names = list(sug.held_out)
            floors = ", ".join(f"{n} ≥ {v:g}" for n, v in sug.floors.items()) or "none"
            lines += [
                f"## Tuned settings of {index} (maximise {sug.metric}; floors on the tuning half: {floors})",
                "",
                f"Best on all questions: `{sug.settings}`. Chosen per half: "
                + ", ".join(f"`{s}`" for s in sug.fold_settings)
                + ". Held out (each half scored with the other half's choice): "
                + ", ".join(f"{n} {_pct(sug.held_out[n])}" for n in names)
                + ".",
                "",
                "| settings | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names),
            ]
            for row in sug.by_settings:
                cells = " | ".join(f"{100 * row[n]:.1f}" for n in names)
                lines.append(f"| `{row['settings']}` | {cells} |")
            lines.append("")
        return "\n".join(lines)

    def markdown(self) -> str:
        parts = [self.board.markdown()]
        for extra in (self.reproduction_markdown(), self.weights_markdown(), self.settings_markdown()):
            if extra:
                parts.append(extra)
        return "\n".join(parts)

    def summary_records(self) -> list[dict[str, Any]]:
        """One flat record per (config, mode): the `--json` output."""
        keys = CHROMA_KEYS if self.protocol == "chroma" else FULL_KEYS
        records = []
        for report in self.reports:
            for mode, summary in report.summaries.items():
                record: dict[str, Any] = {
                    "config": report.config,
                    "index": report.index,
                    "mode": mode,
                    "dataset": self.dataset,
                    "protocol": self.protocol,
                    "k": self.k,
                    "n_questions": report.n_questions,
                }
                ci: dict[str, list[float]] = {}
                for out_key, metric in keys.items():
                    est = summary.overall.get(metric.format(k=self.k))
                    if est is None:
                        continue
                    name = out_key.format(k=self.k)
                    record[name] = round(est.mean, 6)
                    ci[name] = [round(est.low, 6), round(est.high, 6)]
                record["ci95"] = ci
                build = self.build_reports.get(report.index, {})
                suggestion = self.weight_suggestions.get(report.index)
                if suggestion is not None:
                    record["suggested_weight"] = suggestion.as_dict()
                tuned = self.settings_suggestions.get(report.index)
                if tuned is not None:
                    record["tuned_settings"] = tuned.as_dict()
                record["embeddings_computed"] = build.get("embeddings_computed")
                record["embeddings_reused"] = build.get("embeddings_reused")
                records.append(record)
        return records


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

    from retrieval.config import IndexSpec, load_index_configs, with_coarse_companions
    from retrieval.embedder import embedder_for_config
    from retrieval.indexing import publish, stage_bm25, stage_chunks, stage_embeddings
    from retrieval.query import Searcher
    from retrieval.store import Store

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
        embedder = embedder_for_config(config)
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
        chunk_report = stage_chunks(store, spec, embedding_model=embedder)
        steps.update()
        steps.set_postfix_str(f"embeddings ({chunk_report.chunks_staged} chunks staged)")
        embed_report = stage_embeddings(store, spec, embedder)
        steps.update()
        steps.set_postfix_str("bm25")
        stage_bm25(store, spec)
        steps.update()
        steps.set_postfix_str("publish")
        publish_report = publish(store, spec)
        steps.update()
        build_seconds = time.perf_counter() - started
        builds[spec.name] = {
            **chunk_report.as_metadata(),
            **embed_report.as_metadata(),
            **publish_report.as_metadata(),
            "build_seconds": build_seconds,
        }
        if config_name not in wanted:
            steps.close()
            continue
        steps.set_postfix_str(f"evaluating {len(questions)} questions")
        searcher = Searcher(store, embedder, bm25_backend=bm25_backend)
        report = evaluate_index(
            searcher,
            spec,
            questions,
            modes,
            k,
            dataset=data.name,
            store=store,
            n_resamples=n_resamples,
            progress=lambda mode, bar=steps: bar.set_postfix_str(f"evaluating {mode}"),
            notes=data.problems,
        )
        report.cost["embeddings_computed"] = float(embed_report.embeddings_computed)
        report.cost["embeddings_reused"] = float(embed_report.embeddings_reused)
        report.cost["build_seconds"] = round(build_seconds, 2)
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
        if record:
            store.record_evaluation(spec.name, report)
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


def _pct(est: Any) -> str:
    return f"{100 * est.mean:.1f} [{100 * est.low:.1f}, {100 * est.high:.1f}]"


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
