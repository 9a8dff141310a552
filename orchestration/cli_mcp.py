"""`chunkyard mcp`: the project's indexes as an MCP server, over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve search, list_indexes and read_span to MCP clients (stdio, or --http)",
        parents=[common],
    )
    mcp.add_argument(
        "--http",
        action="store_true",
        help="streamable HTTP at /mcp instead of stdio; with CHUNKYARD_API_KEY set, it or a stored key"
        " (`chunkyard keys`) is required",
    )
    mcp.add_argument(
        "--host", default="127.0.0.1", help="with --http: address to listen on (default 127.0.0.1)"
    )
    mcp.add_argument("--port", type=int, default=8001, help="with --http: port to listen on (default 8001)")


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """fd 1 pointed at stderr meanwhile: with stdio, stdout is the protocol's, so nothing else may write there
    (the embedded Postgres started here, a library's print)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_mcp(args: argparse.Namespace) -> int:
    from chunkyard.orchestration.cli_errors import UsageError
    from chunkyard.retrieval.api.http_guards import exposure_error
    from chunkyard.retrieval.integrations.mcp_server import SearcherSource, create_server, http_app
    from chunkyard.retrieval.store.db import database_url

    api_key = os.environ.get("CHUNKYARD_API_KEY") or None
    if args.http:
        refused = exposure_error(args.host, api_key)
        if refused:  # an open server on a network interface: refuse before anything starts
            raise UsageError(refused)
    with _stdout_to_stderr():
        os.environ["DATABASE_URL"] = database_url()  # the project's database (started if embedded)
        searcher = SearcherSource()
        server = create_server(searcher)
        if args.http and api_key:  # stored keys are read from the database: its tables exist first
            searcher.store().migrate()
    if not args.http:
        server.run("stdio")
        return 0
    from chunkyard.retrieval.api.server_limits import serve

    print(
        f"MCP server (streamable HTTP) for project {os.environ.get('CHUNKYARD_PROJECT')} on "
        f"http://{args.host}:{args.port}/mcp ({'API key required' if api_key else 'no API key'})",
        file=sys.stderr,
        flush=True,
    )
    # the service's server limits and redacted log (no token, no database password), keys as it checks them
    app = http_app(server, api_key, args.host, store=searcher.store)
    serve(app, args.host, args.port, secrets=[api_key or ""], log_level="warning")
    return 0
