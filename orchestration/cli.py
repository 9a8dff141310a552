"""`chunkyard`: the command line for the whole life of a collection, on the current project.

chunkyard init [DIR]          make DIR (default: here) a project: a chunkyard.yaml
chunkyard add NAME FOLDER...  add a collection of your documents to chunkyard.yaml
chunkyard index [NAME]        build its indexes (Dagster runs, shown by `chunkyard ui`)
chunkyard search "..."        query an index (through `chunkyard serve` when it runs)
chunkyard serve               the query service (HTTP API on :8000, docs at /docs)
chunkyard ui                  the Dagster UI on the same database (:3000)
chunkyard eval                benchmarks (pipeline.benchmark)
chunkyard questions generate  an eval set from a collection's chunks, by an LLM
chunkyard alias set/show/rollback  what a serving alias (`docs`) answers from
chunkyard stack up|down|compose    the deployed services as local processes (or the Compose file)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestration import (
    cli_alias,
    cli_check,
    cli_lag,
    cli_models,
    cli_questions,
    cli_stack,
    run_checks,
    service_file,
)
from orchestration.cli_errors import RuntimeFailure, Stopped, UsageError, report, stops_embedded_postgres
from orchestration.progress import RunProgress

PROJECT_COMMANDS = {"add", "index", "demo", "search", "serve", "ui", "eval", "questions", "alias", "check"}
UI_SHUTDOWN_SECONDS = 30


def _print(message: str = "") -> None:
    print(message, flush=True)


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
    from retrieval.config import load_collection_configs

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
    summary = _run_summary(result)
    for line in summary["failures"]:
        _print(f"  ! {line}")
    failed_checks = run_checks.failed_checks(result.all_events)
    for check in failed_checks:
        _print(f"  ! {check.line()}")
    succeeded = result.success and not any(check.error for check in failed_checks)
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
        first = next((s for s in load_collection_configs()[chosen[0]].indexes), None)
        if first:
            _print(f'\nSearch it: chunkyard search "your question" --index {chosen[0]}/{first}')
        return 0
    if result.success:  # every step ran; an error-level check failed
        errors = [check for check in failed_checks if check.error]
        raise RuntimeFailure(
            f"{len(errors)} check(s) failed, first {errors[0].name} on {errors[0].asset}",
            run_checks.hint(failed_checks),
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


def cmd_ui(args: argparse.Namespace) -> int:
    """`dagster dev` on the code location `chunkyard` with DAGSTER_HOME and DATABASE_URL set."""
    from orchestration.instance import WORKSPACE_FILE, ensure_instance

    home = ensure_instance()
    command = [sys.executable, "-m", "dagster", "dev", "-w", str(home / WORKSPACE_FILE)]
    command += ["--host", args.host, "--port", str(args.port)]
    _print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={home})")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    # SIGINT may be ignored when started in the background; dagster dev needs it to shut down.
    process = subprocess.Popen(command, env=env, preexec_fn=_default_sigint)
    stopping: list[float] = []

    def stop(signum: int, frame: object) -> None:
        # dagster dev shuts its webserver, daemon and code servers down cleanly on SIGINT.
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        stopping.append(time.monotonic())

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while True:
        try:
            code = process.wait(timeout=1)
            return 0 if stopping else code
        except subprocess.TimeoutExpired:
            if stopping and time.monotonic() - stopping[0] > UI_SHUTDOWN_SECONDS:
                process.kill()
                return process.wait()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cmd_instance(args: argparse.Namespace) -> int:
    """Write $DAGSTER_HOME/dagster.yaml for this database and create Dagster's tables in it, once,
    before the webserver and the daemon start (both would otherwise race to create them)."""
    from orchestration.instance import get_instance

    instance = get_instance()
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


def cmd_search(args: argparse.Namespace) -> int:
    from retrieval.config import default_collection
    from retrieval.db import chunkyard_home
    from retrieval.options import SearchOptions

    options = SearchOptions.from_arguments(args)
    index = cli_alias.index_or_alias(args.index, default_collection())
    started = time.perf_counter()
    running = None if args.no_service else service_file.running(chunkyard_home())
    if running is not None:
        from retrieval.client import Client

        with Client(running["url"], api_key=os.environ.get("CHUNKYARD_API_KEY")) as client:
            results = client.search(args.query, index=index, options=options)
        path = f"via the running service {running['url']} (pid {running['pid']})"
    else:
        from retrieval.query import Searcher

        # one query: BM25 from the postings in Postgres (loading the in-memory copy would cost more)
        results = Searcher(bm25_backend="sql").search(args.query, index, options)
        path = "in-process (no running service: `chunkyard serve` keeps the model warm)"
    _print(f"{index}: {len(results)} result(s) in {time.perf_counter() - started:.2f} s, {path}")
    for hit in results:
        scores = ", ".join(f"{name}={value:.4f}" for name, value in sorted(hit.scores.items()))
        _print(f"{hit.rank}. {hit.doc_id} [{hit.start}:{hit.end}] {scores}")
        text = " ".join(hit.text.split())
        _print(f"   {text[:300]}{'...' if len(text) > 300 else ''}")
    return 0


def _common() -> argparse.ArgumentParser:
    """--project, --debug and --with-benchmarks, before or after the command's name."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--project", metavar="DIR", default=argparse.SUPPRESS, help="the project folder")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    common.add_argument(
        "--with-benchmarks",
        action="store_true",
        default=argparse.SUPPRESS,
        help="include benchmark collections (chroma_general)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="chunkyard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = sub.add_parser("init", help="make a folder a chunkyard project", parents=[common])
    init.add_argument("dir", nargs="?", default=".", help="the folder (created if missing; default: here)")

    add = sub.add_parser("add", help="add a collection of documents to chunkyard.yaml", parents=[common])
    add.add_argument("name", help="collection name (lowercase letters, digits, '-', '_', '.')")
    add.add_argument("paths", nargs="+", metavar="PATH", help="folders of documents")
    add.add_argument(
        "--include", action="append", metavar="GLOB", help="default **/* (unsupported types are reported)"
    )
    add.add_argument("--exclude", action="append", metavar="GLOB")
    add.add_argument(
        "--index", action="append", metavar="CONFIG", help="index config (default recursive-256)"
    )
    add.add_argument("--replace", action="store_true", help="overwrite an existing collection of that name")

    index = sub.add_parser(
        "index", help="build a collection's indexes (all when none named)", parents=[common]
    )
    index.add_argument("name", nargs="?", help="collection of chunkyard.yaml")
    index.add_argument(
        "--dry-run",
        action="store_true",
        help="check the configuration and show what would be built (= check)",
    )
    demo = sub.add_parser(
        "demo", help="index and evaluate the demo collection (= index demo)", parents=[common]
    )
    demo.add_argument("--collection", default="demo", help="collection of chunkyard.yaml")

    ui = sub.add_parser("ui", help="start the Dagster UI (dagster dev)", parents=[common])
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)

    sub.add_parser("instance", help="write $DAGSTER_HOME/dagster.yaml for DATABASE_URL (or the embedded DB)")

    serve = sub.add_parser("serve", help="start the query service", parents=[common])
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)

    sub.add_parser("eval", help="run benchmarks (further arguments go to pipeline.benchmark)", add_help=False)

    search = sub.add_parser("search", help="query an index", parents=[common])
    search.add_argument("query")
    search.add_argument(
        "--index", default="recursive-256", help="collection/config (bare config: the project's collection)"
    )
    search.add_argument("--no-service", action="store_true", help="search in-process even if a service runs")
    from retrieval.options import SearchOptions

    SearchOptions.add_arguments(search)  # one flag per search option: -k, --mode, --context-weight, ...
    cli_check.add_parser(sub, common)
    cli_questions.add_parser(sub, common)
    cli_alias.add_parser(sub, common)
    cli_stack.add_parser(sub, common)
    cli_lag.add_parser(sub, common)
    cli_models.add_parser(sub, common)
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


def main(argv: Sequence[str] | None = None) -> int:
    # pgserver's platformdirs warns on every start where XDG_RUNTIME_DIR is unset (containers, cron)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR is not set.*")
    flags, argv = _split_globals(list(sys.argv[1:] if argv is None else argv))
    command = argv[0] if argv else ""
    if command == "eval":
        args, handler = flags, lambda a: cmd_eval(a, argv[1:])
    else:
        args = build_parser().parse_args(argv, namespace=flags)
        handlers: dict[str, Callable[[argparse.Namespace], int]] = {
            "init": cmd_init,
            "add": cmd_add,
            "index": cmd_index,
            "demo": cmd_index,
            "ui": cmd_ui,
            "instance": cmd_instance,
            "serve": cmd_serve,
            "search": cmd_search,
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
        print(f"chunkyard {command}: interrupted", file=sys.stderr)
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
