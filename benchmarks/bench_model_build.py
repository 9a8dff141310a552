"""Peak memory of building the multilingual model from an empty model cache, two commands side by side.

`python -m benchmarks.bench_model_build --vs OLD_CHUNKYARD NEW_CHUNKYARD` runs `chunkyard models build
multilingual-e5-small` with each command, in turn, into its own empty CHUNKYARD_MODEL_DIR, under
`/usr/bin/time -v` (the largest single process's peak) while sampling the summed resident memory of
the whole process tree every 0.2 s (what the machine had to hold at once, child processes included).
It writes benchmarks/results/model_build_memory.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

RESULTS = Path(__file__).parent / "results" / "model_build_memory.md"
MODEL = "multilingual-e5-small"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def tree_rss(process: psutil.Process) -> int:
    """Bytes resident in `process` and all its descendants now."""
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            continue
    return total


def measure(command: str) -> dict[str, float]:
    """One build from an empty model cache: wall seconds, `time -v`'s max RSS, the tree's peak."""
    with tempfile.TemporaryDirectory(prefix="bench-model-build-") as cache:
        env = {**os.environ, "CHUNKYARD_MODEL_DIR": cache}
        started = time.perf_counter()
        process = subprocess.Popen(
            ["/usr/bin/time", "-v", command, "models", "build", MODEL],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        watched = psutil.Process(process.pid)
        peak = 0
        while process.poll() is None:
            peak = max(peak, tree_rss(watched))
            time.sleep(0.2)
        out, err = process.communicate()
        wall = time.perf_counter() - started
        if process.returncode != 0:
            raise SystemExit(f"{command} models build failed: {err[-2000:]}")
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
        return {
            "wall_s": wall,
            "max_rss_gb": int(found.group(1)) * 1024 / 1e9 if found else float("nan"),
            "tree_peak_gb": peak / 1e9,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", nargs=2, metavar=("OLD", "NEW"), required=True, help="two chunkyard commands")
    args = parser.parse_args()
    before = uptime()
    rows = [(command, measure(command)) for command in args.vs]
    after = uptime()
    lines = [
        "# Building multilingual-e5-small from an empty model cache: peak memory",
        "",
        f"`python -m benchmarks.bench_model_build --vs {' '.join(args.vs)}` (one build each, in turn; "
        f"load before: `{before}`; after: `{after}`). `max RSS` is `/usr/bin/time -v`'s largest single "
        "process; `tree peak` the summed resident memory of the command and its child processes, "
        "sampled every 0.2 s. Wall time is not comparable on this shared machine: it shows the load.",
        "",
        "| command | max RSS (GB) | tree peak (GB) | wall (s) |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| `{command}` | {r['max_rss_gb']:.2f} | {r['tree_peak_gb']:.2f} | {r['wall_s']:.0f} |"
        for command, r in rows
    ]
    (old, new) = (r for _, r in rows)
    lines += ["", f"Tree peak, new / old: {new['tree_peak_gb'] / old['tree_peak_gb']:.2f}x."]
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
