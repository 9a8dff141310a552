"""`chunkyard ui`: the Dagster UI (`dagster dev`) on the project's instance, stopped cleanly on Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# dagster dev stops its webserver, daemon and code servers in a few seconds, but took over 30 s on a
# machine at load 15 (benchmarks/results/test_durations.md): after this long it is killed, and said so
UI_SHUTDOWN_SECONDS = 90
UI_LOG = "ui.log"  # dagster dev's output, beside the Dagster home in .chunkyard/


def _print(message: str = "") -> None:
    print(message, flush=True)


def cmd_ui(args: argparse.Namespace) -> int:
    """`dagster dev` on the code location `chunkyard` with DAGSTER_HOME and DATABASE_URL set."""
    from chunkyard.orchestration.instance import WORKSPACE_FILE, ensure_instance
    from chunkyard.retrieval.settings.project import AUTOMATION_ENV, read_project, ui_automation
    from chunkyard.retrieval.store.db import chunkyard_home

    automation = ui_automation(read_project())
    home = ensure_instance()
    command = [sys.executable, "-m", "dagster", "dev", "-w", str(home / WORKSPACE_FILE)]
    command += ["--host", args.host, "--port", str(args.port)]
    url = f"http://{args.host}:{args.port}"
    log_path = chunkyard_home() / UI_LOG
    _print(f"Starting the Dagster UI (DAGSTER_HOME={home}; its log: {log_path})")
    _print(what_it_runs(automation))
    env = {**os.environ, "DAGSTER_HOME": str(home), AUTOMATION_ENV: "1" if automation else "0"}
    # dagster dev's own lines (its warnings, click's `Aborted!` on Ctrl-C) go to the log: this command
    # says when the UI answers and when it stopped. SIGINT may be ignored when started in the
    # background; dagster dev needs it to shut down.
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, env=env, preexec_fn=_default_sigint, stdout=log, stderr=subprocess.STDOUT
        )
    stopping: list[float] = []

    def stop(signum: int, frame: object) -> None:
        # dagster dev shuts its webserver, daemon and code servers down cleanly on SIGINT.
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        stopping.append(time.monotonic())

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    ready = False
    while True:
        try:
            code = process.wait(timeout=1)
            if stopping:
                _print("Dagster UI stopped")
                return 0
            print(f"chunkyard ui: dagster dev exited ({code}); the end of {log_path}:", file=sys.stderr)
            print(_tail(log_path), file=sys.stderr)
            return code or 1
        except subprocess.TimeoutExpired:
            if stopping and time.monotonic() - stopping[0] > UI_SHUTDOWN_SECONDS:
                process.kill()
                process.wait()
                print(
                    f"chunkyard ui: dagster dev did not stop within {UI_SHUTDOWN_SECONDS} s of the signal; killed it"
                    f" (its log: {log_path})",
                    file=sys.stderr,
                )
                return 1
            if not ready and not stopping and _answers(url):
                ready = True
                _print(f"Dagster UI ready on {url} (Ctrl-C stops it)")


def _answers(url: str) -> bool:
    """Whether the webserver answers (its `/server_info`), within a second."""
    import httpx

    try:
        return httpx.get(f"{url}/server_info", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def what_it_runs(automation: bool) -> str:
    """The line `chunkyard ui` starts with: whether its daemon will index anything by itself."""
    if automation:
        return (
            "Automation on (ui_automation: true): the document sensor re-indexes changed files and "
            "automation runs evaluations and leaderboards after a publish, as runs of their own"
        )
    return (
        "Automation off: nothing runs until you launch it (the document sensor and automation are "
        "stopped; start them on the Automation page, or set `ui_automation: true` in chunkyard.yaml)"
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def add_proxy_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`ui-proxy` (orchestration.ui_proxy) under the command's subparsers."""
    proxy = sub.add_parser(
        "ui-proxy",
        help="serve the Dagster UI behind the API key (CHUNKYARD_API_KEY; the Compose ui-proxy)",
        parents=[common],
    )
    proxy.add_argument("--upstream", default="http://127.0.0.1:3000", help="the Dagster webserver's URL")
    proxy.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    proxy.add_argument("--port", type=int, default=3001, help="port to listen on (default 3001)")
    proxy.add_argument(
        "--api",
        default=os.environ.get("CHUNKYARD_API_URL", ""),
        help="the query service that checks stored admin keys (default $CHUNKYARD_API_URL; none: only the key)",
    )


def cmd_ui_proxy(args: argparse.Namespace) -> int:
    from chunkyard.orchestration.ui_proxy import KEY_ENV, build_app
    from chunkyard.retrieval.api.server_limits import ServerLimits, serve

    key = os.environ.get(KEY_ENV, "")
    if not key:
        print(
            f"chunkyard ui-proxy: needs an API key; set {KEY_ENV} (or CHUNKYARD_API_KEY_FILE in Compose)",
            file=sys.stderr,
        )
        return 2
    print(f"Dagster UI ({args.upstream}) behind the API key on http://{args.host}:{args.port}", flush=True)
    from chunkyard.orchestration.ui_proxy_keys import StoredKeys

    stored = StoredKeys(args.api) if args.api else None
    try:  # a bad CHUNKYARD_*_S setting: one line naming it
        limits = ServerLimits.from_env()
        app = build_app(args.upstream, key, stored)
    except ValueError as exc:
        print(f"chunkyard ui-proxy: {exc}", file=sys.stderr)
        return 2
    serve(app, args.host, args.port, limits=limits, secrets=[key])  # timeouts, redacted log
    return 0
