"""`chunkyard stack up|down|compose`: the deployed services (orchestration.stack), run or rendered."""

from __future__ import annotations

import argparse
import sys

from chunkyard.orchestration import stack_local


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """The `stack` command and its three subcommands."""
    stack = sub.add_parser(
        "stack",
        help="the deployed services: Postgres, Dagster webserver and daemon, the query service",
        parents=[common],
    )
    verbs = stack.add_subparsers(dest="stack_command", required=True, metavar="up|down|compose")
    up = verbs.add_parser(
        "up", help="run them as local processes on loopback until Ctrl-C or SIGTERM", parents=[common]
    )
    up.add_argument("--pg-port", type=int, default=stack_local.DEFAULT_PG_PORT, help="Postgres's port")
    up.add_argument(
        "--webserver-port", type=int, default=stack_local.DEFAULT_WEBSERVER_PORT, help="the Dagster UI's port"
    )
    up.add_argument(
        "--query-port", type=int, default=stack_local.DEFAULT_QUERY_PORT, help="the query service's port"
    )
    up.add_argument(
        "--code-server-port",
        type=int,
        default=stack_local.DEFAULT_CODE_SERVER_PORT,
        help="the Dagster code server's port (loopback; the webserver and daemon use it)",
    )
    up.add_argument(
        "--sensor-interval",
        type=int,
        metavar="S",
        help="seconds between document-sensor ticks (default: CHUNKYARD_SENSOR_INTERVAL, else 30)",
    )
    up.add_argument(
        "--automation-interval",
        type=int,
        metavar="S",
        help="seconds between automation ticks (default: CHUNKYARD_AUTOMATION_INTERVAL, else 30)",
    )
    up.add_argument(
        "--ready-timeout", type=float, default=stack_local.READY_TIMEOUT_S, help="seconds to become healthy"
    )
    verbs.add_parser("down", help="stop the stack `stack up` runs for this project", parents=[common])
    verbs.add_parser(
        "compose",
        help="print docker/docker-compose.yml (generated from the same definition)",
        parents=[common],
    )


def cmd_stack(args: argparse.Namespace) -> int:
    if args.stack_command == "compose":
        from chunkyard.orchestration.stack import compose_yaml

        sys.stdout.write(compose_yaml())
        return 0
    from chunkyard.chunking.environment import env_int
    from chunkyard.orchestration.stack import AUTOMATION_INTERVAL_ENV, SENSOR_INTERVAL_ENV
    from chunkyard.retrieval.settings.project import project_root
    from chunkyard.retrieval.store.db import chunkyard_home

    root = project_root()  # `up` and `down` work on a project (`compose` needs none)
    home = chunkyard_home()
    if args.stack_command == "down":
        print(stack_local.down(home), flush=True)
        return 0
    for name in ("sensor_interval", "automation_interval"):
        value = getattr(args, name)
        if value is not None and value < 1:
            from chunkyard.orchestration.cli_errors import UsageError

            raise UsageError(f"--{name.replace('_', '-')}: at least 1 second, got {value}")
    from chunkyard.orchestration.stack_stop import running_stack

    running = running_stack(stack_local.state_dir(home))  # by stack.json, or by the services' marker
    if running is not None:
        from chunkyard.orchestration.cli_errors import UsageError

        raise UsageError(running)
    target = stack_local.local_target(
        home,
        root,
        pg_port=args.pg_port,
        webserver_port=args.webserver_port,
        query_port=args.query_port,
        code_server_port=args.code_server_port,
        sensor_interval=args.sensor_interval or env_int(SENSOR_INTERVAL_ENV, None, unit="whole seconds"),
        automation_interval=args.automation_interval
        or env_int(AUTOMATION_INTERVAL_ENV, None, unit="whole seconds"),
    )
    return stack_local.Stack(target).up(args.ready_timeout)
