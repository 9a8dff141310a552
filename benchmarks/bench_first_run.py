"""A newcomer's first hour, timed: the README's walk-through from an empty folder, as a user runs it.

Two new projects on this machine, one after the other, each `init` + `add` + its first `index`, with
an empty per-machine model cache before the first (so it builds the ONNX export) and the warm cache
for the second (the time saved is the export); then `chunkyard search` in-process, `chunkyard serve`
until `/readyz` answers 200, and `chunkyard search` through the running service. Every command is a
real process of the installed `chunkyard`; each search is the median of `--repeat` calls.

`python -m benchmarks.bench_first_run` writes benchmarks/results/first_run.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
CHUNKYARD = str(Path(sys.executable).parent / "chunkyard")
DOCS = ("overview.md", "architecture.md", "configuration.md", "deployment.md", "chunking.md")
QUERY = "How is an index named?"


def run(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([CHUNKYARD, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"chunkyard {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def new_project(root: Path, name: str, env: dict[str, str]) -> tuple[Path, float]:
    """An empty folder made a project with one collection of the docs; the first `index`'s seconds."""
    folder = root / f"{name}-docs"
    folder.mkdir()
    for doc in DOCS:
        shutil.copy(REPO_ROOT / "docs" / doc, folder / doc)
    project = root / name
    project.mkdir()
    run(["init"], project, env)
    run(["add", "mine", str(folder)], project, env)
    seconds, _ = run(["index"], project, env)
    return project, seconds


def searches(project: Path, env: dict[str, str], repeat: int, *extra: str) -> float:
    return statistics.median(
        run(["search", QUERY, "-k", "3", *extra], project, env)[0] for _ in range(repeat)
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(project: Path, env: dict[str, str], repeat: int) -> dict[str, float]:
    """`chunkyard serve` until /readyz is 200, the searches through it, then SIGTERM."""
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen(
        [CHUNKYARD, "serve", "--port", str(port)],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.perf_counter() - started > 600:
                raise RuntimeError("chunkyard serve did not become ready")
            time.sleep(0.2)
        ready = time.perf_counter() - started
        via = searches(project, env, repeat)
        return {"serve_ready_s": ready, "search_via_service_s": via}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="calls per search figure (median)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="first-run-") as tmp:
        root = Path(tmp)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "CHUNKYARD_PROJECT", "CHUNKYARD_HOME")
        }
        env["CHUNKYARD_MODEL_DIR"] = str(root / "model-cache")  # empty: the first project builds the export
        first, first_index = new_project(root, "first", env)
        _, second_index = new_project(root, "second", env)
        in_process = searches(first, env, args.repeat, "--no-service")
        served = serve(first, env, args.repeat)
        state_mb = sum(p.stat().st_size for p in (first / ".chunkyard").rglob("*") if p.is_file()) / 1e6
        cache_mb = sum(p.stat().st_size for p in (root / "model-cache").rglob("*") if p.is_file()) / 1e6
    report = {
        "first_index_s": first_index,
        "second_index_s": second_index,
        "search_in_process_s": in_process,
        **served,
        "project_state_mb": state_mb,
        "model_cache_mb": cache_mb,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "first_run.json").write_text(json.dumps(report, indent=2) + "\n")
    load = lambda v: ", ".join(f"{x:.1f}" for x in v)  # noqa: E731
    (RESULTS / "first_run.md").write_text(
        "# A newcomer's first run\n\n"
        f"`python -m benchmarks.bench_first_run` (2 cores; load average {load(load_before)} before, "
        f"{load(report['load_after'])} after). Two new projects of the same {len(DOCS)} documents "
        "(docs/), each `init` + `add` + first `chunkyard index` (documents, one config's chunks, BM25, "
        "embeddings, publish), the per-machine model cache empty before the first; searches are the "
        f"median of {args.repeat} calls of the `chunkyard` command, Python start-up included.\n\n"
        "| step | seconds |\n| --- | ---: |\n"
        f"| first project's first `chunkyard index` (builds the model export) | {first_index:.1f} |\n"
        f"| second project's first `chunkyard index` (reuses it) | {second_index:.1f} |\n"
        f"| time saved by the shared export | {first_index - second_index:.1f} |\n"
        f"| `chunkyard search` with no service (model loaded per call) | {in_process:.1f} |\n"
        f"| `chunkyard serve` until `/readyz` is 200 | {served['serve_ready_s']:.1f} |\n"
        f"| `chunkyard search` through the running service | {served['search_via_service_s']:.1f} |\n\n"
        f"The project's `.chunkyard/` held {state_mb:.0f} MB (mostly the embedded Postgres); the shared "
        f"model cache {cache_mb:.0f} MB.\n"
    )
    print((RESULTS / "first_run.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
