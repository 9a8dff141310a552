"""A user's first day in their own language (issue 39), two `chunkyard` commands side by side.

For each command given (`--vs OLD NEW`: two installed `chunkyard` executables, say main's and a
branch's), in one run, alternating: a new project of a 15-file multilingual folder (Spanish, Ukrainian,
Indonesian, Arabic and Thai articles of tests/data/multilingual, three files a language), `init` + `add`
+ its first `index`, timed; then a second new project whose first `index` gets SIGINT (a terminal's
Ctrl-C, to the whole process group) part way through its embedding step, and the resumed `index`,
whose counts say how many chunks came back from the embedding cache and how many were embedded again.
The model cache is shared (built before); every project has its own embedded Postgres.

`python -m benchmarks.bench_first_day --vs ../before/.venv/bin/chunkyard .venv/bin/chunkyard`
writes benchmarks/results/first_day.md (`make bench-first-day`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
MULTILINGUAL = REPO_ROOT / "tests" / "data" / "multilingual"
LANGUAGES = ("es", "uk", "id", "ar", "th")
STATE_VARIABLES = (
    "CHUNKYARD_PROJECT",
    "CHUNKYARD_PROJECT_DIR",
    "CHUNKYARD_HOME",
    "DATABASE_URL",
    "DAGSTER_HOME",
)
EMBEDDINGS = re.compile(r"Embeddings: (\d+) computed for new text, (\d+) reused")
STEP = re.compile(r"\[\d+/\d+\] ok\s+(\S+) \(([\d.]+) s\)")


def folder(root: Path) -> Path:
    """15 files: per language, three files of the six articles (rotated, so no two files are equal)."""
    docs = root / "my-docs"
    for language in LANGUAGES:
        articles = [p.read_text(encoding="utf-8") for p in sorted((MULTILINGUAL / language).glob("*.md"))]
        for i in range(3):
            rotated = articles[2 * i :] + articles[: 2 * i]
            (docs / language).mkdir(parents=True, exist_ok=True)
            (docs / language / f"notes-{i}.md").write_text("\n\n".join(rotated), encoding="utf-8")
    return docs


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}


def project(chunkyard: str, root: Path) -> Path:
    work = root / "project"
    work.mkdir(parents=True)
    for argv in (["init"], ["add", "mine", str(folder(root))]):
        subprocess.run([chunkyard, *argv], cwd=work, env=env(), check=True, capture_output=True, timeout=600)
    return work


def first_index(chunkyard: str, root: Path) -> dict[str, float]:
    work = project(chunkyard, root)
    started = time.perf_counter()
    done = subprocess.run(
        [chunkyard, "index"], cwd=work, env=env(), capture_output=True, text=True, timeout=3600
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{chunkyard} index failed: {done.stderr[-1500:]}")
    steps = {name.rsplit("__", 1)[-1]: float(took) for name, took in STEP.findall(done.stdout)}
    computed = EMBEDDINGS.search(done.stdout)
    progress = [line for line in done.stdout.splitlines() if "chunks embedded" in line]
    return {
        "seconds": seconds,
        "embedding_step": steps.get("embeddings", float("nan")),
        "chunks": float(computed[1]) if computed else float("nan"),
        "progress_lines": float(len(progress)),
    }


def interrupted(chunkyard: str, root: Path, after_s: float) -> dict[str, float]:
    """SIGINT `after_s` into the embedding step, then the resumed index's counts."""
    work = project(chunkyard, root)
    process = subprocess.Popen(
        [chunkyard, "index"],
        cwd=work,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    started = None
    for line in process.stdout:
        if "__bm25" in line and "] ok " in line:  # on 2 cores the embedding step runs after BM25's
            started = time.monotonic()
            break
    if started is None:
        raise RuntimeError(f"{chunkyard} index ended before its BM25 step finished")
    time.sleep(after_s)
    os.killpg(process.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
    rest = process.communicate(timeout=600)[0]
    if "embeddings (" in rest and "] ok " in rest.split("embeddings (")[0].splitlines()[-1]:
        raise RuntimeError(f"{chunkyard}: the embedding step finished before the interrupt; lower the share")
    done = subprocess.run(
        [chunkyard, "index"], cwd=work, env=env(), capture_output=True, text=True, timeout=3600
    )
    counts = EMBEDDINGS.search(done.stdout)
    if done.returncode != 0 or counts is None:
        raise RuntimeError(f"{chunkyard} index (resumed) failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    return {"interrupted_after": after_s, "recomputed": float(counts[1]), "reused": float(counts[2])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vs", nargs=2, metavar=("OLD", "NEW"), required=True, help="two chunkyard commands")
    parser.add_argument(
        "--interrupt-share",
        type=float,
        default=0.6,
        help="of the embedding step, after BM25's, before SIGINT",
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "first_day.md")
    args = parser.parse_args()
    load_before = os.getloadavg()
    first: dict[str, dict[str, float]] = {}
    stopped: dict[str, dict[str, float]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="first-day-"))
    try:
        for label, command in zip(("old", "new"), args.vs, strict=True):
            first[label] = first_index(command, scratch / f"{label}-first")
        for label, command in zip(("old", "new"), args.vs, strict=True):
            after = first[label]["embedding_step"] * args.interrupt_share
            stopped[label] = interrupted(command, scratch / f"{label}-stopped", after)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()
    rows = [
        ("first `chunkyard index`, seconds", "seconds", "{:.1f}"),
        ("its embedding step, seconds", "embedding_step", "{:.1f}"),
        ("chunks embedded", "chunks", "{:.0f}"),
        ("embedding progress lines (piped)", "progress_lines", "{:.0f}"),
    ]
    lines = [
        "# A user's first day in their own language",
        "",
        f"`python -m benchmarks.bench_first_day --vs {args.vs[0]} {args.vs[1]}`: 2 cores shared with other "
        f"jobs, load average {', '.join(f'{x:.1f}' for x in load_before)} before and "
        f"{', '.join(f'{x:.1f}' for x in load_after)} after (`os.getloadavg`, as `uptime`). One run, the two "
        "commands alternating; a 15-file multilingual folder (es, uk, id, ar, th), `add`'s choice of config "
        "(recursive-256-multilingual on both), the model cache built before.",
        "",
        "| | old | new |",
        "| --- | ---: | ---: |",
    ]
    for title, key, fmt in rows:
        lines.append(f"| {title} | {fmt.format(first['old'][key])} | {fmt.format(first['new'][key])} |")
    for title, key, fmt in (
        ("Ctrl-C, seconds after the BM25 step (the embedding step's start)", "interrupted_after", "{:.1f}"),
        ("resumed: chunks reused from the embedding cache", "reused", "{:.0f}"),
        ("resumed: chunks embedded (again or for the first time)", "recomputed", "{:.0f}"),
    ):
        lines.append(f"| {title} | {fmt.format(stopped['old'][key])} | {fmt.format(stopped['new'][key])} |")
    lines += [
        "",
        f"The interrupt came {args.interrupt_share:.0%} of each command's own embedding step (as timed in its "
        "first index, model load included) after its BM25 step finished, when the embedding step starts on "
        "these 2 cores; what the resumed run reused from the embedding cache is what the interrupted one kept, "
        "and the work lost is the chunks embedded before the interrupt less those.",
        "",
    ]
    args.output.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
