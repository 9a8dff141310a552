"""`chunkyard`: the command line the Makefile targets call.

chunkyard demo     index + evaluate the demo collection through the Dagster instance
chunkyard ui       the Dagster UI (dagster dev) on the same database
chunkyard serve    the query service (uvicorn retrieval.service:app)
chunkyard eval     benchmarks (delegates to pipeline.benchmark)
chunkyard search   query an index from the terminal
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence


def _print(message: str = "") -> None:
    print(message, flush=True)


def cmd_demo(args: argparse.Namespace) -> int:
    """Materialise every asset of a collection as a real run of the persistent Dagster instance."""
    from orchestration.instance import get_instance

    started = time.perf_counter()
    instance = get_instance()
    _print(f"Dagster home: {os.environ['DAGSTER_HOME']}")
    from dagster import AssetSelection, materialize

    from orchestration.definitions import build_definitions

    defs = build_definitions(database_url=os.environ["DATABASE_URL"])
    graph = defs.resolve_asset_graph()
    prefix = args.collection.replace("-", "_")
    keys = [k for k in graph.get_all_asset_keys() if k.path[0] == prefix]
    if not keys:
        _print(
            f"chunkyard demo: no assets for collection {args.collection!r}; check configs/collections.yaml"
        )
        return 2
    assets = [a for a in defs.assets if any(k in keys for k in a.keys)]  # type: ignore[union-attr]
    _print(f"Materialising {len(keys)} assets of collection {args.collection!r} ...")
    result = materialize(
        assets,
        instance=instance,
        resources=defs.resources,
        selection=AssetSelection.assets(*keys),
        tags={"chunkyard/trigger": "demo"},
        # Step-by-step DEBUG events stay in the event log (see `chunkyard ui`); warnings print here.
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        raise_on_error=False,
    )
    summary = _run_summary(result)
    for line in summary["failures"]:
        _print(f"  ! {line}")
    _print()
    _print(
        f"Run {result.run_id} {'succeeded' if result.success else 'FAILED'} in "
        f"{time.perf_counter() - started:.1f} s (visible in `chunkyard ui`)."
    )
    _print(f"Documents: {summary['documents']}")
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
    return 0 if result.success else 1


def _run_summary(result) -> dict:
    """Counts and the leaderboard from a run's materialisation metadata."""
    summary: dict = {"computed": 0, "reused": 0, "staged": 0, "kept": 0, "documents": "", "failures": []}
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error  # type: ignore[union-attr]
            summary["failures"].append(f"{event.step_key}: {error.message.strip() if error else 'failed'}")
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
            summary["documents"] = ", ".join(
                f"{meta.get(f'documents_{k}', 0)} {k}"
                for k in ("added", "changed", "deleted", "unchanged", "failed")
            )
        elif key[-1] == "leaderboard":
            summary["leaderboard"] = meta.get("summary") or meta.get("leaderboard")
            summary["chart"] = meta.get("chart_path")
            summary["full_table"] = meta.get("markdown_path")
    return summary


def cmd_ui(args: argparse.Namespace) -> int:
    """`dagster dev -m orchestration.definitions` with DAGSTER_HOME and DATABASE_URL set."""
    from orchestration.instance import ensure_instance

    home = ensure_instance()
    command = [
        sys.executable,
        "-m",
        "dagster",
        "dev",
        "-m",
        "orchestration.definitions",
        "--host",
        args.host,
        "--port",
        str(args.port),
    ]
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
            return process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            if stopping and time.monotonic() - stopping[0] > UI_SHUTDOWN_SECONDS:
                process.kill()
                return process.wait()


UI_SHUTDOWN_SECONDS = 30


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cmd_instance(args: argparse.Namespace) -> int:
    """Write $DAGSTER_HOME/dagster.yaml for this database (containers run this before Dagster)."""
    from orchestration.instance import ensure_instance

    home = ensure_instance()
    _print(f"Dagster instance: {home / 'dagster.yaml'}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from retrieval.db import database_url

    os.environ["DATABASE_URL"] = database_url()
    uvicorn.run("retrieval.service:app", host=args.host, port=args.port, log_level="info")
    return 0


def cmd_eval(args: argparse.Namespace, rest: Sequence[str]) -> int:
    from pipeline.benchmark import main as benchmark_main

    result = benchmark_main(list(rest))
    return int(result or 0)


def cmd_search(args: argparse.Namespace) -> int:
    import retrieval
    from retrieval.options import SearchOptions

    results = retrieval.search(args.query, index=args.index, options=SearchOptions.from_arguments(args))
    if not results:
        _print("no results")
    for hit in results:
        scores = ", ".join(f"{name}={value:.4f}" for name, value in sorted(hit.scores.items()))
        _print(f"{hit.rank}. {hit.doc_id} [{hit.start}:{hit.end}] {scores}")
        text = " ".join(hit.text.split())
        _print(f"   {text[:300]}{'...' if len(text) > 300 else ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chunkyard", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="index and evaluate the demo collection, print the leaderboard")
    demo.add_argument("--collection", default="demo", help="collection of configs/collections.yaml")

    ui = sub.add_parser("ui", help="start the Dagster UI (dagster dev)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)

    sub.add_parser("instance", help="write $DAGSTER_HOME/dagster.yaml for DATABASE_URL (or the embedded DB)")

    serve = sub.add_parser("serve", help="start the query service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)

    sub.add_parser(
        "eval", help="run benchmarks (all further arguments go to pipeline.benchmark)", add_help=False
    )

    search = sub.add_parser("search", help="query an index")
    search.add_argument("query")
    search.add_argument("--index", default="recursive-256", help="collection/config (bare config = demo)")
    from retrieval.options import SearchOptions

    SearchOptions.add_arguments(search)  # one flag per search option: -k, --mode, --context-weight, ...
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["eval"]:
        return cmd_eval(argparse.Namespace(command="eval"), argv[1:])
    args = parser.parse_args(argv)
    handlers = {
        "demo": cmd_demo,
        "ui": cmd_ui,
        "instance": cmd_instance,
        "serve": cmd_serve,
        "search": cmd_search,
    }
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
