"""`chunkyard`: the command line for the whole life of a collection, on the current project.

chunkyard init [DIR]          make DIR (default: here) a project: a chunkyard.yaml
chunkyard add NAME FOLDER...  add a collection of your documents to chunkyard.yaml
chunkyard check [NAME]        check every config field; show what `index` would build
chunkyard index [NAME]        build its indexes (Dagster runs, shown by `chunkyard ui`)
chunkyard search "..."        query an index (through `chunkyard serve` when it runs)
chunkyard serve               the query service (HTTP API on :8000, docs at /docs)
chunkyard ui                  the Dagster UI on the same database (:3000)
chunkyard eval                evaluate configs: --collection NAME (its eval_set) or --dataset
chunkyard questions generate  an eval set from a collection's chunks, by an LLM
chunkyard alias set/show/rollback  what a serving alias (`docs`) answers from
chunkyard stack up|down|compose    the deployed services as local processes (or the Compose file)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestration import (
    cli_alias,
    cli_check,
    cli_help,
    cli_lag,
    cli_models,
    cli_questions,
    cli_search,
    cli_stack,
    cli_ui,
    run_report,
)
from orchestration.cli_errors import RuntimeFailure, Stopped, UsageError, report, stops_embedded_postgres
from orchestration.progress import RunProgress

PROJECT_COMMANDS = {"add", "index", "demo", "search", "serve", "ui", "eval", "questions", "alias", "check"}


def _print(message: str = "", end: str = "\n") -> None:
    print(message, end=end, flush=True)


def cmd_init(args: argparse.Namespace) -> int:
    from orchestration.project import init_project

    path = init_project(Path(args.dir))
    _print(f"Initialised chunkyard project {path.parent} ({path.name}; state in .chunkyard/)")
    _print('Next: chunkyard add NAME FOLDER  then  chunkyard index  then  chunkyard search "..."')
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from orchestration.project import add_collection
    from retrieval.project import PROJECT_FILE, project_root

    root = project_root()
    entry = add_collection(
        root,
        args.name,
        args.paths,
        include=args.include,
        exclude=args.exclude,
        indexes=args.index,
        replace=args.replace,
    )
    _print(
        f"Added collection {args.name!r} to {root / PROJECT_FILE}: {', '.join(entry['folders'])} "
        f"({len(entry['include'])} include pattern(s)), indexes {', '.join(entry['indexes'])}"
    )
    _print(f"Next: chunkyard index {args.name}")
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    """Materialise the collection's assets as a real run of the project's Dagster instance."""

    chosen = cli_check.chosen_collections(getattr(args, "name", None) or getattr(args, "collection", None))
    planned = cli_check.check_project(chosen)  # every config, before anything runs: exit 2 on a problem
    if getattr(args, "dry_run", False):
        cli_check.print_plan(planned)
        return 0
    started = time.perf_counter()
    from dagster import AssetSelection, materialize

    from assets.definitions import build_definitions
    from assets.keys import collection_keys
    from assets.runs import host_tags, sweep_dead_runs
    from orchestration.instance import get_instance

    instance = get_instance()
    swept = sweep_dead_runs(instance)
    if swept:
        _print(f"Marked {len(swept)} run(s) whose process is gone as failed: {', '.join(swept)}")
    defs = build_definitions(database_url=os.environ["DATABASE_URL"])
    graph = defs.resolve_asset_graph()
    keys = [k for c in chosen for k in collection_keys(c, graph.get_all_asset_keys())]
    assets = [a for a in defs.assets if any(k in keys for k in a.keys)]  # type: ignore[union-attr]
    _print(f"Indexing {', '.join(chosen)}: {len(keys)} assets (Dagster home {os.environ['DAGSTER_HOME']})")
    progress = RunProgress(total=len(keys), stream=sys.stdout)
    with progress:
        result = materialize(
            assets,
            instance=instance,
            resources=defs.resources,
            selection=AssetSelection.assets(*keys),
            tags={**host_tags(), "chunkyard/trigger": "cli", **progress.tags},
            # Step events stay in the event log (`chunkyard ui`); the progress display and the summary
            # below show the steps and their errors.
            run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
            raise_on_error=False,
        )
    if run_report.interrupted(result.all_events):
        raise KeyboardInterrupt  # one line from main(), not the interrupted step's error
    summary = _run_summary(result)
    for line in summary["failures"]:
        if "DagsterAssetCheckFailedError" not in line:  # a blocking check: listed below with its numbers
            _print(f"  ! {line}")
    failed_checks = run_report.failed_checks(result.all_events)
    for check in failed_checks:
        _print(f"  ! {check.line()}")
    succeeded = result.success and not any(check.error for check in failed_checks)
    notes = run_report.evaluation_notes(result.all_events)
    _print("".join(f"  note: {note}\n" for note in notes), end="")
    if summary["skipped_files"]:
        _print(f"Files skipped ({len(summary['skipped_files'])}):")
        for path, reason in summary["skipped_files"]:
            _print(f"  - {path}: {reason}")
    _print()
    _print(
        f"Run {result.run_id} {'succeeded' if succeeded else 'FAILED'} in "
        f"{time.perf_counter() - started:.1f} s (visible in `chunkyard ui`)."
    )
    for collection, counts in sorted(summary["documents"].items()):  # every collection indexed
        _print(
            f"Documents: {counts}"
            if len(summary["documents"]) == 1
            else f"Documents ({collection}): {counts}"
        )
    _print(
        f"Chunks (all configs): {summary['staged']} new or changed, {summary['kept']} kept unchanged "
        "(neither re-chunked nor re-embedded)"
    )
    _print(
        f"Embeddings: {summary['computed']} computed, {summary['reused']} reused from the embedding cache"
        + (", nothing re-embedded" if summary["computed"] == 0 else "")
    )
    board = summary.get("leaderboard")
    if board:
        _print()
        _print(board)
        if summary.get("full_table"):
            _print(f"\nAll metrics with cost: {summary['full_table']}")
        if summary.get("chart"):
            _print(f"Chart: {summary['chart']}")
    if succeeded:
        _print(cli_search.suggestion(chosen[0], summary.get("best")))
        return 0
    errors = [check for check in failed_checks if check.error]
    if errors:  # an error-level check failed (a blocking one stopped the steps after it)
        raise RuntimeFailure(
            f"{len(errors)} check(s) failed, first {errors[0].name} on {errors[0].asset}",
            run_report.hint(failed_checks),
        )
    raise RuntimeFailure(
        f"run {result.run_id} failed: {summary['failures'][0] if summary['failures'] else 'see the UI'}",
        "fix the cause above and rerun `chunkyard index` (finished steps are not redone)"
        if summary["failures"]
        else "open `chunkyard ui` (http://127.0.0.1:3000) for the step logs; fix and rerun `chunkyard index`",
    )


def _run_summary(result) -> dict:
    """Counts, skipped files and the leaderboard from a run's materialisation metadata."""
    summary: dict = {
        "computed": 0,
        "reused": 0,
        "staged": 0,
        "kept": 0,
        "documents": {},  # collection (asset key prefix) -> its documents step's counts
        "failures": [],
        "skipped_files": [],
    }
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error  # type: ignore[union-attr]
            while error is not None and error.cause is not None:  # Dagster's wrapper -> the step's error
                error = error.cause
            message = " ".join(error.message.split()) if error else "failed"
            summary["failures"].append(f"{event.step_key}: {message}")
        if not event.is_step_materialization:
            continue
        materialization = event.step_materialization_data.materialization
        key = materialization.asset_key.path
        meta = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
        if key[-1] == "chunks":
            summary["staged"] += int(meta.get("chunks_staged", 0) or 0)
            summary["kept"] += int(meta.get("chunks_kept", 0) or 0)
        elif key[-1] == "embeddings":
            summary["computed"] += int(meta.get("embeddings_computed", 0) or 0)
            summary["reused"] += int(meta.get("embeddings_reused", 0) or 0)
        elif key[-1] == "documents":
            summary["documents"][key[0]] = ", ".join(
                f"{meta.get(f'documents_{k}', 0)} {k}"
                for k in ("added", "changed", "deleted", "unchanged", "failed")
            )
            summary["skipped_files"].extend(_failure_rows(str(meta.get("failures", ""))))
        elif key[-1] == "leaderboard":
            summary["leaderboard"] = meta.get("summary") or meta.get("leaderboard")
            summary["best"] = (meta.get("best_index"), meta.get("best_mode"))
            summary["chart"] = meta.get("chart_path")
            summary["full_table"] = meta.get("markdown_path")
    return summary


def _failure_rows(markdown: str) -> list[tuple[str, str]]:
    """(file, reason) rows of the documents step's failure table."""
    rows = []
    for line in markdown.splitlines():
        if line.startswith("| `"):
            path, _, reason = line[3:].partition("` | ")
            rows.append((path.replace("\\|", "|"), reason.rstrip(" |").replace("\\|", "|")))
    return rows


def cmd_instance(args: argparse.Namespace) -> int:
    """Write $DAGSTER_HOME/dagster.yaml for this database and create Dagster's tables in it, once,
    before the webserver and the daemon start (both would otherwise race to create them)."""
    from orchestration.instance import get_instance

    instance = get_instance()
    from orchestration.stack_stop import STACK_ENV

    if os.environ.get(STACK_ENV):  # a local stack starting: no process of an earlier one is left
        from assets.runs import fail_runs_of_a_gone_stack

        left = fail_runs_of_a_gone_stack(instance)
        if left:
            _print(
                f"Failed {len(left)} run(s) the previous stack left unfinished (the reconciler retries them)"
            )
    instance.dispose()
    _print(f"Dagster instance: {os.environ['DAGSTER_HOME']}/dagster.yaml")
    from retrieval.store import Store

    store = Store()  # the versions Dagster and the indexes run on (Postgres, pgvector)
    try:
        from retrieval.db import verify_server

        _print(f"Database: {store.vector_features().describe()}; {verify_server(store.url).describe()}")
    finally:
        store.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from retrieval import service_file
    from retrieval.db import chunkyard_home, database_url
    from retrieval.http_guards import exposure_error

    refused = exposure_error(args.host, os.environ.get("CHUNKYARD_API_KEY"))
    if refused:  # an open API on a network interface: refuse before anything starts
        raise UsageError(refused)
    os.environ["DATABASE_URL"] = database_url()
    record = service_file.write(chunkyard_home(), args.host, args.port)
    _print(
        f"Query service for project {os.environ.get('CHUNKYARD_PROJECT')} on {record['url']} (docs at /docs)"
    )
    try:
        uvicorn.run("retrieval.service:app", host=args.host, port=args.port, log_level="info")
    finally:
        service_file.remove(chunkyard_home(), os.getpid())
    return 0


def cmd_eval(args: argparse.Namespace, rest: Sequence[str]) -> int:
    from pipeline.benchmark import main as benchmark_main

    return int(benchmark_main(list(rest)) or 0)


def _common() -> argparse.ArgumentParser:
    """--project and --debug, before or after the command's name (every command takes them)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--project",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the project folder (default: found from here up)",
    )
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return common


def _benchmarks() -> argparse.ArgumentParser:
    """--with-benchmarks: only on the commands that read the collections."""
    flag = argparse.ArgumentParser(add_help=False)
    flag.add_argument(
        "--with-benchmarks",
        action="store_true",
        default=argparse.SUPPRESS,
        help="include benchmark collections (chroma_general)",
    )
    return flag


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    collections = [common, _benchmarks()]
    parser = cli_help.Parser(
        prog="chunkyard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=collections,
    )
    cli_help.add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = sub.add_parser("init", help="make a folder a chunkyard project", parents=[common])
    init.add_argument("dir", nargs="?", default=".", help="the folder (created if missing; default: here)")

    add = sub.add_parser("add", help="add a collection of documents to chunkyard.yaml", parents=[common])
    add.add_argument("name", help="collection name (lowercase letters, digits, '-', '_', '.')")
    add.add_argument("paths", nargs="+", metavar="PATH", help="folders of documents")
    add.add_argument(
        "--include", action="append", metavar="GLOB", help="default **/* (unsupported types are reported)"
    )
    add.add_argument("--exclude", action="append", metavar="GLOB", help="files to leave out (repeatable)")
    add.add_argument(
        "--index", action="append", metavar="CONFIG", help="index config (default recursive-256)"
    )
    add.add_argument("--replace", action="store_true", help="overwrite an existing collection of that name")

    index = sub.add_parser(
        "index", help="build a collection's indexes (all when none named)", parents=collections
    )
    index.add_argument("name", nargs="?", help="collection of chunkyard.yaml (default: all of them)")
    index.add_argument(
        "--dry-run",
        action="store_true",
        help="check the configuration and show what would be built (= check)",
    )
    demo = sub.add_parser(
        "demo", help="index and evaluate the demo collection (= index demo)", parents=collections
    )
    demo.add_argument("--collection", default="demo", help="collection of chunkyard.yaml")

    ui = sub.add_parser("ui", help="start the Dagster UI (dagster dev)", parents=collections)
    ui.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)"
    )
    ui.add_argument("--port", type=int, default=3000, help="port to listen on (default 3000)")

    sub.add_parser(
        "instance",
        help="write $DAGSTER_HOME/dagster.yaml for DATABASE_URL (or the embedded DB)",
        parents=[common],
    )

    serve = sub.add_parser(
        "serve", help="start the query service (HTTP API, docs at /docs)", parents=[common]
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)"
    )
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")

    sub.add_parser(
        "eval",
        help="run benchmarks (`chunkyard eval --help`: pipeline.benchmark's arguments)",
        add_help=False,
    )
    cli_search.add_parser(sub, collections)
    cli_check.add_parser(sub, collections)
    cli_questions.add_parser(sub, common)
    cli_alias.add_parser(sub, common)
    cli_stack.add_parser(sub, common)
    cli_lag.add_parser(sub, common)
    cli_models.add_parser(sub, common)
    cli_help.describe_commands(parser)
    return parser


def _split_globals(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The global flags before the command (so `chunkyard --project X eval ...` works too)."""
    flags = argparse.Namespace()
    rest = list(argv)
    while (
        rest
        and rest[0] in ("--project", "--debug", "--with-benchmarks")
        or rest[:1]
        and rest[0].startswith("--project=")
    ):
        flag = rest.pop(0)
        if flag == "--debug":
            flags.debug = True
        elif flag == "--with-benchmarks":
            flags.with_benchmarks = True
        elif flag.startswith("--project="):
            flags.project = flag.partition("=")[2]
        elif rest:
            flags.project = rest.pop(0)
    return flags, rest


def _eval_flags(flags: argparse.Namespace, rest: list[str]) -> list[str]:
    """`chunkyard eval ... --project DIR --debug`: chunkyard's own flags after `eval` too; the rest
    goes to pipeline.benchmark."""
    known = argparse.ArgumentParser(add_help=False, parents=[_common(), _benchmarks()])
    parsed, rest = known.parse_known_args(rest, namespace=flags)
    return rest


def main(argv: Sequence[str] | None = None) -> int:
    # pgserver's platformdirs warns on every start where XDG_RUNTIME_DIR is unset (containers, cron)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR is not set.*")
    flags, argv = _split_globals(list(sys.argv[1:] if argv is None else argv))
    command = argv[0] if argv else ""
    if command == "eval":
        rest = _eval_flags(flags, argv[1:])
        args, handler = flags, lambda a: cmd_eval(a, rest)
    else:
        parser = build_parser()
        if cli_help.print_help_when_bare(parser, argv):
            return 0
        args = parser.parse_args(argv, namespace=flags)
        handlers: dict[str, Callable[[argparse.Namespace], int]] = {
            "init": cmd_init,
            "add": cmd_add,
            "index": cmd_index,
            "demo": cmd_index,
            "ui": cli_ui.cmd_ui,
            "instance": cmd_instance,
            "serve": cmd_serve,
            "search": cli_search.cmd_search,
            "questions": cli_questions.cmd_questions,
            "alias": cli_alias.cmd_alias,
            "check": cli_check.cmd_check,
            "stack": cli_stack.cmd_stack,
            "lag": cli_lag.cmd_lag,
            "models": cli_models.cmd_models,
        }
        handler = handlers[args.command]
    debug = bool(getattr(args, "debug", False))
    try:
        _enter_project(args, command)
        with stops_embedded_postgres():
            return handler(args)
    except Stopped:
        print(f"chunkyard {command}: stopped (SIGTERM)", file=sys.stderr)
        return 0
    except KeyboardInterrupt:
        resume = f"; run `chunkyard {command}` again to resume" if command in ("index", "demo") else ""
        print(f"chunkyard {command}: interrupted{resume}", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        return report(command, exc)


def _enter_project(args: argparse.Namespace, command: str) -> None:
    """Resolve the project once and name it in the environment, so the processes a command starts
    (dagster dev, run workers) find the same project wherever they run."""
    from retrieval.project import BENCHMARKS_ENV, PROJECT_ENV, project_root

    if getattr(args, "project", None):
        os.environ[PROJECT_ENV] = str(Path(args.project).expanduser().resolve())
    if getattr(args, "with_benchmarks", False):
        os.environ[BENCHMARKS_ENV] = "1"
    if command in PROJECT_COMMANDS:
        os.environ[PROJECT_ENV] = str(project_root())


if __name__ == "__main__":
    sys.exit(main())
