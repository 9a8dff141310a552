"""Peak memory of building the multilingual model from an empty model cache, two commands side by side.

`python -m benchmarks.bench_model_build --vs OLD_CHUNKYARD NEW_CHUNKYARD` runs `chunkyard models build
multilingual-e5-small` with each command, in turn, into its own empty CHUNKYARD_MODEL_DIR, under
`/usr/bin/time -v` (the largest single process's peak) while sampling the summed resident memory of
the whole process tree every 0.2 s (what the machine had to hold at once, child processes included).
`--rounds N` repeats the pair, the order alternating; `--labels` names the commands in the table. The
sha256 of each build's two ONNX files is compared across all builds. It writes
benchmarks/results/model_build_memory.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

RESULTS = Path(__file__).parent / "results" / "model_build_memory.md"
MODEL = "multilingual-e5-small"
ONNX_FILES = ("model.onnx", "model_quint8_avx2.onnx")


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


def onnx_digests(cache: Path) -> tuple[str, ...]:
    """sha256 of the build's fp32 and int8 ONNX files (the export's folder in the model cache)."""
    (export,) = [path for path in (cache / "onnx").glob(f"{MODEL}-*") if path.is_dir()]
    return tuple(hashlib.sha256((export / "onnx" / name).read_bytes()).hexdigest() for name in ONNX_FILES)


def measure(command: str) -> tuple[dict[str, float], tuple[str, ...]]:
    """One build from an empty model cache: wall seconds, `time -v`'s max RSS, the tree's peak; the
    sha256 of its two ONNX files."""
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
        }, onnx_digests(Path(cache))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", nargs=2, metavar=("OLD", "NEW"), required=True, help="two chunkyard commands")
    parser.add_argument("--labels", nargs=2, metavar=("OLD", "NEW"), help="their names in the table")
    parser.add_argument("--rounds", type=int, default=1, help="builds of each, the order alternating")
    args = parser.parse_args()
    labels = args.labels or [f"`{command}`" for command in args.vs]
    before = uptime()
    rows: list[tuple[int, int, dict[str, float]]] = []
    digests: set[tuple[str, ...]] = set()
    for round_number in range(1, args.rounds + 1):
        order = (0, 1) if round_number % 2 else (1, 0)
        for which in order:
            result, digest = measure(args.vs[which])
            rows.append((round_number, which, result))
            digests.add(digest)
    after = uptime()
    lines = [
        "# Building multilingual-e5-small from an empty model cache: peak memory",
        "",
        f"`python -m benchmarks.bench_model_build --vs OLD NEW --rounds {args.rounds}` ({labels[0]} against "
        f"{labels[1]}; each round builds once with each, the order alternating; load before: `{before}`; "
        f"after: `{after}`). `max RSS` is `/usr/bin/time -v`'s largest single process; `tree peak` the "
        "summed resident memory of the command and its child processes, sampled every 0.2 s. Wall time "
        "on a shared machine shows its load too.",
        "",
        "| command | round | max RSS (GB) | tree peak (GB) | wall (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {labels[which]} | {n} | {r['max_rss_gb']:.2f} | {r['tree_peak_gb']:.2f} | {r['wall_s']:.0f} |"
        for n, which, r in rows
    ]
    medians = [
        {key: statistics.median(r[key] for _, w, r in rows if w == which) for key in rows[0][2]}
        for which in (0, 1)
    ]
    old, new = medians
    lines += [
        "",
        f"Medians, new / old: tree peak {new['tree_peak_gb']:.2f} / {old['tree_peak_gb']:.2f} GB "
        f"({new['tree_peak_gb'] / old['tree_peak_gb']:.2f}x), wall {new['wall_s']:.0f} / {old['wall_s']:.0f} s "
        f"({new['wall_s'] / old['wall_s']:.2f}x). The two ONNX files (sha256) were "
        + ("the same in every build." if len(digests) == 1 else f"not the same: {len(digests)} versions."),
    ]
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
