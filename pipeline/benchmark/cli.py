"""`chunkyard eval`'s command line: flags -> `run_benchmark` -> tables or one JSON object."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from chunkyard.evaluation.datasets import CHROMA_GENERAL, DatasetError
from chunkyard.pipeline.benchmark.results import PROTOCOLS
from chunkyard.pipeline.benchmark.run import (
    BenchmarkError,
    BenchmarkRequest,
    collection_eval_set,
    run_benchmark,
)
from chunkyard.retrieval.query.budget import llm_tokenizer
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import LLM_TOKENIZERS

EVAL_SET_FORMAT = """\
An eval set (a collection's `eval_set:`, `chunkyard add --eval-set FILE`, or --dataset FILE) is JSON
Lines (.jsonl) or YAML, one question per record:

  {"id": "q1", "question": "When are the tide tables published?",
   "references": [{"doc": "harbour.md", "text": "every Monday morning"}]}
  {"question": "Which database?", "answers": ["Postgres", "PostgreSQL"]}
  {"question": "...", "references": [{"doc": "a.md", "start": 120, "end": 180}]}

`references` are all needed (recall counts how much of them is retrieved): each names its document
(`doc`: the path inside the collection's folder) and the `text` that answers (found in the document),
or its `start`/`end` character offsets. `answers` are alternatives: any one found answers. `id` is
optional. A reference whose text is gone after an edit skips its question, with a note.

Example: chunkyard eval --collection mine --variant bm25 --variant hybrid_auto
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkyard eval",
        description="Build and evaluate index configs on an evaluation dataset.",
        epilog=EVAL_SET_FORMAT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dataset",
        default=None,
        help="chroma_general, a SQuAD .json, or a .jsonl/.yaml eval set (default: the --collection's "
        "eval_set; with neither flag, that of the default index's collection (the one `chunkyard search` "
        f"reads), else {CHROMA_GENERAL})",
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
        "--variant",
        "--mode",
        action="append",
        dest="variants",
        metavar="VARIANT",
        help="a search mode (dense, bm25, hybrid, hybrid_weighted, hybrid_auto), <mode>+rerank, or served: "
        "exactly what /v1/search runs when a request names no option (repeatable; default: dense, bm25, "
        "hybrid, served). --mode is an alias kept for older commands",
    )
    parser.add_argument("--k", type=int, default=5, help="top k (protocol chroma: always 5)")
    parser.add_argument(
        "--llm-tokenizer",
        type=_llm_tokenizer,
        default=LLM_TOKENIZERS[0],
        help="the LLM tokenizer context_tokens_at_k and budget_recall_N count in: cl100k_base, o200k_base "
        "or a name of the project's llm_tokenizers (default: %(default)s)",
    )
    parser.add_argument(
        "--collection",
        help="a collection of chunkyard.yaml: its eval_set over its folders (or the name to index --dataset as)",
    )
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
    parser.add_argument(
        "--full",
        action="store_true",
        help="print every metric and cost column (default: the short view that fits a terminal; "
        "the files written always hold the full report)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    return parser


def default_evaluated_collection() -> str | None:
    """The collection `chunkyard eval` evaluates when given neither --dataset nor --collection: the
    default index's (`retrieval.settings.default_index`), when it has an `eval_set`; else None."""
    from chunkyard.retrieval.settings.config import load_collections
    from chunkyard.retrieval.settings.default_index import NoDefaultIndex, default_index
    from chunkyard.retrieval.settings.project import ProjectError, find_project

    try:
        if find_project() is None:
            return None
        name = default_index().collection
        collection = load_collections().get(name)
    except (NoDefaultIndex, ProjectError):
        return None
    return name if collection is not None and collection.eval_set else None


def _default_output(dataset: str, protocol: str) -> Path:
    from chunkyard.retrieval.settings.project import project_root

    name = "chroma" if dataset == CHROMA_GENERAL and protocol == "chroma" else Path(dataset).stem
    suffix = "" if protocol == "chroma" else f"_{protocol}"
    return project_root() / "benchmarks" / "results" / f"eval_{name}{suffix}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of `chunkyard eval`; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        documents = None
        if args.dataset is None and args.collection is None:
            args.collection = default_evaluated_collection()  # None: chroma_general, as before
        if args.dataset is None:
            args.dataset, documents = (
                collection_eval_set(args.collection) if args.collection else (CHROMA_GENERAL, None)
            )
        output = args.output
        if output is None and documents is not None:  # a project's own collection: its reports folder
            from chunkyard.retrieval.store.db import chunkyard_home

            output = chunkyard_home() / "reports" / args.collection / f"eval_{args.protocol}"
        elif output is None and not args.json and not args.configs and not args.limit_questions:
            output = _default_output(args.dataset, args.protocol)
        result = run_benchmark(
            BenchmarkRequest(
                args.dataset,
                documents=documents,
                protocol=args.protocol,
                configs=args.configs,
                variants=args.variants,
                k=args.k,
                llm_tokenizer=args.llm_tokenizer,
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
        print(result.markdown(compact=not args.full))
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


def _llm_tokenizer(text: str) -> str:
    """--llm-tokenizer: a built-in encoding or one of the project's llm_tokenizers, found here."""
    try:
        llm_tokenizer(text)
    except SearchError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("llm_tokenizer: ")) from None
    return text


def _number(text: str) -> int | float:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else float(text)


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


if __name__ == "__main__":
    raise SystemExit(main())
