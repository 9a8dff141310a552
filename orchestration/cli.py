"""`chunkyard`: the command line for the whole life of a collection, on the current project.

chunkyard init [DIR]          make DIR (default: here) a project: a chunkyard.yaml
chunkyard add NAME FOLDER...  add a collection of your documents to chunkyard.yaml
chunkyard check [NAME]        check every config field; show what `index` would build
chunkyard configs             the index configs: model, languages, chunk size, embedding cost
chunkyard chunks DOC          a document's chunks in an index: spans, pages, where each was cut
chunkyard index [NAME]        build its indexes (Dagster runs, shown by `chunkyard ui`)
chunkyard search "..."        query an index (through `chunkyard serve` when it runs)
chunkyard serve               the query service (HTTP API on :8000, docs at /docs)
chunkyard mcp                 the indexes as an MCP server (stdio, or --http on :8001)
chunkyard ui                  the Dagster UI on the same database (:3000)
chunkyard eval                evaluate configs: --collection NAME (its eval_set) or --dataset
chunkyard questions generate  an eval set from a collection's chunks, by an LLM
chunkyard alias set/show/rollback  what a serving alias (`docs`) answers from
chunkyard keys create/list/revoke  API keys of the query service; `chunkyard audit` who changed what
chunkyard stack up|down|compose    the deployed services as local processes (or the Compose file)
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from chunkyard.orchestration import (
    cli_alias,
    cli_check,
    cli_chunks,
    cli_configs,
    cli_help,
    cli_index,
    cli_keys,
    cli_lag,
    cli_mcp,
    cli_models,
    cli_questions,
    cli_search,
    cli_stack,
    cli_ui,
)
from chunkyard.orchestration.cli_errors import Stopped, UsageError, report, stops_embedded_postgres

PROJECT_COMMANDS = {
    "add",
    "index",
    "demo",
    "search",
    "serve",
    "ui",
    "eval",
    "questions",
    "alias",
    "check",
    "chunks",
    "keys",
    "audit",
    "mcp",
}


def _print(message: str = "", end: str = "\n") -> None:
    print(message, end=end, flush=True)


def cmd_init(args: argparse.Namespace) -> int:
    from chunkyard.orchestration.project_file import init_project

    path = init_project(Path(args.dir))
    _print(f"Initialised chunkyard project {path.parent} ({path.name}; state in .chunkyard/)")
    _print('Next: chunkyard add NAME FOLDER  then  chunkyard index  then  chunkyard search "..."')
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from chunkyard.orchestration.project_file import add_collection
    from chunkyard.retrieval.settings.project import PROJECT_FILE, project_root

    root = project_root()
    entry, choice = add_collection(
        root,
        args.name,
        args.paths,
        include=args.include,
        exclude=args.exclude,
        indexes=args.index,
        replace=args.replace,
        eval_set=args.eval_set,
    )
    _print(
        f"Added collection {args.name!r} to {root / PROJECT_FILE}: {', '.join(entry['folders'])} "
        f"({len(entry['include'])} include pattern(s)), indexes {', '.join(entry['indexes'])}"
    )
    if choice is not None:  # chosen, not named: say why
        _print(f"Chose {choice.config}: {choice.reason}")
    if entry.get("eval_set"):
        _print(
            f"Evaluated on {entry['eval_set']}: `chunkyard index` scores it, `chunkyard eval --collection {args.name}` too"
        )
    _print(f"Next: chunkyard index {args.name}")
    return 0


def cmd_instance(args: argparse.Namespace) -> int:
    """Write $DAGSTER_HOME/dagster.yaml for this database and create Dagster's tables in it, once,
    before the webserver and the daemon start (both would otherwise race to create them)."""
    from chunkyard.orchestration.instance import get_instance

    instance = get_instance()
    from chunkyard.orchestration.stack_stop import STACK_ENV

    if os.environ.get(STACK_ENV):  # a local stack starting: no process of an earlier one is left
        from chunkyard.assets.runs import fail_runs_of_a_gone_stack

        left = fail_runs_of_a_gone_stack(instance)
        if left:
            _print(
                f"Failed {len(left)} run(s) the previous stack left unfinished (the reconciler retries them)"
            )
    instance.dispose()
    _print(f"Dagster instance: {os.environ['DAGSTER_HOME']}/dagster.yaml")
    from chunkyard.retrieval.store import Store

    store = Store()  # the versions Dagster and the indexes run on (Postgres, pgvector)
    try:
        from chunkyard.retrieval.store.db import verify_server

        _print(f"Database: {store.vector_features().describe()}; {verify_server(store.url).describe()}")
    finally:
        store.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from chunkyard.retrieval.api import service_file
    from chunkyard.retrieval.api.admission import AdmissionLimits
    from chunkyard.retrieval.api.http_guards import exposure_error
    from chunkyard.retrieval.api.server_limits import ServerLimits
    from chunkyard.retrieval.api.server_limits import serve as serve_app
    from chunkyard.retrieval.store.db import chunkyard_home, database_url

    refused = exposure_error(args.host, os.environ.get("CHUNKYARD_API_KEY"))
    if refused:  # an open API on a network interface: refuse before anything starts
        raise UsageError(refused)
    try:  # a bad CHUNKYARD_*_S or slots setting: one line naming it, before anything starts
        limits, _ = ServerLimits.from_env(), AdmissionLimits.from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    os.environ["DATABASE_URL"] = database_url()
    record = service_file.write(chunkyard_home(), args.host, args.port)
    _print(
        f"Query service for project {os.environ.get('CHUNKYARD_PROJECT')} on {record['url']} (docs at /docs)"
    )
    try:
        serve_app("chunkyard.retrieval.api.service:app", args.host, args.port, limits=limits)  # redacted log
    finally:
        service_file.remove(chunkyard_home(), os.getpid())
    return 0


def cmd_eval(args: argparse.Namespace, rest: Sequence[str]) -> int:
    from chunkyard.pipeline.benchmark import main as benchmark_main

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
        "--index",
        action="append",
        metavar="CONFIG",
        help="index config (repeatable; default: recursive-256 for a folder at least 95%% English, else "
        "recursive-256-multilingual; `add` says which and why)",
    )
    add.add_argument("--replace", action="store_true", help="overwrite an existing collection of that name")
    add.add_argument(
        "--eval-set",
        metavar="FILE",
        help="questions to evaluate it on (JSON Lines or YAML; `chunkyard eval --help` shows the format)",
    )

    index = sub.add_parser(
        "index", help="build a collection's indexes (all when none named)", parents=collections
    )
    index.add_argument("name", nargs="?", help="collection of chunkyard.yaml (default: all of them)")
    index.add_argument(
        "--dry-run",
        action="store_true",
        help="check the configuration and show what would be built (= check)",
    )
    index.add_argument(
        "--no-wait",
        action="store_true",
        help="refuse, instead of waiting, when a run of the collection is in progress (the daemon's or another)",
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
    cli_configs.add_parser(sub, common)
    cli_chunks.add_parser(sub, common)
    cli_questions.add_parser(sub, common)
    cli_alias.add_parser(sub, common)
    cli_keys.add_parser(sub, common)
    cli_stack.add_parser(sub, common)
    cli_lag.add_parser(sub, common)
    cli_mcp.add_parser(sub, common)
    cli_models.add_parser(sub, common)
    cli_ui.add_proxy_parser(sub, common)
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
    original = list(sys.argv[1:] if argv is None else argv)
    flags, argv = _split_globals(original)
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
            "index": cli_index.cmd_index,
            "demo": cli_index.cmd_index,
            "ui": cli_ui.cmd_ui,
            "instance": cmd_instance,
            "serve": cmd_serve,
            "search": cli_search.cmd_search,
            "questions": cli_questions.cmd_questions,
            "alias": cli_alias.cmd_alias,
            "keys": cli_keys.cmd_keys,
            "audit": cli_keys.cmd_audit,
            "check": cli_check.cmd_check,
            "configs": cli_configs.cmd_configs,
            "chunks": cli_chunks.cmd_chunks,
            "stack": cli_stack.cmd_stack,
            "lag": cli_lag.cmd_lag,
            "mcp": cli_mcp.cmd_mcp,
            "models": cli_models.cmd_models,
            "ui-proxy": cli_ui.cmd_ui_proxy,
        }
        handler = handlers[args.command]
    args.argv = original  # `index` runs itself again in a session of its own (cli_session)
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
    from chunkyard.retrieval.settings.project import BENCHMARKS_ENV, PROJECT_ENV, project_root

    if getattr(args, "project", None):
        os.environ[PROJECT_ENV] = str(Path(args.project).expanduser().resolve())
    if getattr(args, "with_benchmarks", False):
        os.environ[BENCHMARKS_ENV] = "1"
    if command in PROJECT_COMMANDS:
        os.environ[PROJECT_ENV] = str(project_root())


if __name__ == "__main__":
    sys.exit(main())
