"""scale.md from its sections: each benchmark (bench_scale's modes, bench_ceiling, bench_publish) stores
its latest run as one section of scale.json, and the page is rendered from them all."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def markdown(report: dict[str, Any]) -> str:
    runs = report["runs"]
    base = runs[0]["wall_seconds"]
    lines = [
        "# Scale-out: one vs two Celery workers (full index)",
        "",
        f"Collection: {report['documents']} documents ({report['corpus_chars']:,} characters) cut from the "
        f"Chroma benchmark corpora (bench_incremental's collection); index config `{report['config']}` "
        "(all-MiniLM-L6-v2). Each worker count on a fresh database of one embedded "
        f"{report.get('server', 'Postgres')}, a loopback "
        "redis-server 7 as broker and result backend, `dagster-celery worker start -A dagster_celery.app` "
        "workers with the solo pool (one process each), and one run of every asset by `dagster asset "
        "materialize` with the `celery` executor mode; the `embedding` pool limit is 1.",
        f"Machine: {report['machine']}. Measured {report['measured_at']} by `python -m benchmarks.bench_scale"
        f"{report['args']}` (`make bench-scale`), both worker counts in that one run.",
        "",
        "| workers | wall s (materialize process) | run s (Dagster) | speed-up vs 1 | load before | load after |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run['workers']} | {run['wall_seconds']:.1f} | {run['run_seconds']:.1f} | "
            f"{base / run['wall_seconds']:.2f}x | {run['load_before'].split('load average:')[-1].strip()} | "
            f"{run['load_after'].split('load average:')[-1].strip()} |"
        )
    lines += ["", "Seconds per step (STEP_START to STEP_SUCCESS) and the worker that ran it:", ""]
    lines += step_table(runs)
    lines += ["", "## Reading", "", report["reading"], ""]
    return "\n".join(lines)


def reading(runs: list[dict[str, Any]], docs: int) -> str:
    one, two = runs[0], runs[-1]
    ratio = one["wall_seconds"] / two["wall_seconds"]
    embed = one["steps"].get("embeddings", {}).get("seconds", 0.0)
    share = embed / one["wall_seconds"] if one["wall_seconds"] else 0.0
    size = (
        ""
        if docs == 1000
        else f" This run used {docs} documents, not 1,000 (`--docs`), to fit a shared CPU: the same text "
        "cut into fewer, larger documents."
    )
    return (
        f"Two workers took {two['wall_seconds']:.1f} s against {one['wall_seconds']:.1f} s for one: "
        f"a ratio of {ratio:.2f}x (one-worker time over two-worker time). Little gain was expected: the machine has "
        f"{os.cpu_count()} cores shared with other work, the model already uses both cores inside one "
        f"embedding step, and the embedding step is {share:.0%} of the one-worker run. "
        "A single index is a chain (documents -> chunks -> embeddings + bm25 -> publish), so only bm25 "
        "can overlap the embedding step, and the `embedding` pool lets one model step run at a time "
        "across all workers. A second worker pays off with several indexes or collections and with "
        "workers on separate machines (docs/deployment.md), where each has its own cores; raise the "
        f"`embedding` pool limit there (`concurrency: pools:` in dagster.yaml).{size}" + noise(one, two)
    )


def noise(one: dict[str, Any], two: dict[str, Any]) -> str:
    """How much of the difference is the embedding step itself (same work in both runs: CPU load varying)."""
    embed_one = one["steps"].get("embeddings", {}).get("seconds", 0.0)
    embed_two = two["steps"].get("embeddings", {}).get("seconds", 0.0)
    gap = two["wall_seconds"] - one["wall_seconds"]  # > 0: two workers slower
    if not embed_one or not embed_two or not gap:
        return ""
    delta = embed_two - embed_one
    adjusted = one["wall_seconds"] / (two["wall_seconds"] - delta)
    slower = "slower" if gap > 0 else "faster"
    return (
        f" Two workers were {abs(gap):.1f} s {slower}; {delta:+.1f} s of that is the embedding step itself, "
        "which did the same work in both runs (same chunks, one model step at a time, on one worker): that "
        "part is the shared CPU's load changing between the runs, not the second worker. Without it the "
        f"ratio is {adjusted:.2f}x: on one index the second worker has only bm25 to run beside the "
        "embedding step, a second or two."
    )


def markdown_endpoint(report: dict[str, Any]) -> str:
    runs = report["runs"]
    base, phase = runs[0]["wall_seconds"], runs[0]["embedding_phase_seconds"]
    lines = [
        f"## Scale-out against an embedding server of fixed latency ({report['latency'] * 1000:.0f} ms per request)",
        "",
        f"Collection: {report['documents']} documents ({report['corpus_chars']:,} characters"
        + (
            f"; bench_incremental's collection {report['copies']} times over, each copy's sentence and line ends"
            " tagged ` c<k>` so that its chunks are its own"
            if report.get("copies", 1) > 1
            else ""
        )
        + f"), index config "
        f"`{report['config']}` with `embedder: {json.dumps(report['embedder'])}`: the fake OpenAI-compatible server "
        f"(tests/fake_embedding_server.py, its own process on loopback, {report['latency'] * 1000:.0f} ms per "
        f"request, {report['dimensions']} dimensions). `CHUNKYARD_EMBED_SHARDS={report['shards']}` in every run: the "
        f"embedding work is {report['shards']} `embeddings_part<k>` assets (content-hash shards, outside the "
        "`embedding` pool against a server), then `embeddings` stages the cached vectors. Otherwise as in the local-model section below "
        "(fresh database per worker count, redis broker, solo-pool `dagster-celery` workers, one "
        f"`dagster asset materialize` run). Machine: {report['machine']}. Measured {report['measured_at']} by "
        f"`python -m benchmarks.bench_scale{report['args']}`, both worker counts in that one run.",
        "",
        "| workers | wall s | run s (Dagster) | embedding phase s | speed-up, whole run (wall) |"
        " speed-up, embedding phase |"
        " load before | load after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run['workers']} | {run['wall_seconds']:.1f} | {run['run_seconds']:.1f} | "
            f"{run['embedding_phase_seconds']:.1f} | {base / run['wall_seconds']:.2f}x | "
            f"{phase / max(run['embedding_phase_seconds'], 1e-9):.2f}x | "
            f"{run['load_before'].split('load average:')[-1].strip()} | "
            f"{run['load_after'].split('load average:')[-1].strip()} |"
        )
    lines += ["", "Seconds per step and the worker that ran it:", ""]
    lines += step_table(runs)
    lines += ["", report.get("reading", ""), ""]
    if report.get("notes"):  # written by hand after the run (other runs, what was changed since)
        lines += [report["notes"], ""]
    return "\n".join(lines)


def step_table(runs: list[dict[str, Any]]) -> list[str]:
    """Seconds per step and the worker that ran it, one column per worker count."""
    lines = ["| step | " + " | ".join(f"{run['workers']} worker(s)" for run in runs) + " |"]
    lines.append("|---|" + "---|" * len(runs))
    for kind in sorted({k for run in runs for k in run["steps"]}):
        cells = []
        for run in runs:
            step = run["steps"].get(kind)
            cells.append(f"{step['seconds']:.2f} ({step['worker']})" if step else "-")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def endpoint_section(latency: float) -> str:
    """The section of a run against a fake server of `latency` seconds (one per latency, in its order)."""
    return f"endpoint_{round(latency * 1000):05d}ms"


def compose(sections: dict[str, Any]) -> str:
    """scale.md: the endpoint sections (by latency), the pipeline ceiling, the publishes, then the
    local-model section (each if run)."""
    parts = ["# Scale-out and the pipeline's ceiling", ""]
    for name in sorted(n for n in sections if n.startswith("endpoint")):
        parts.append(markdown_endpoint(sections[name]))
    if "ceiling" in sections:  # rendered by bench_ceiling, which imports this module (not the reverse)
        parts.append(sections["ceiling"]["markdown"])
    for name in sorted(n for n in sections if n.startswith("publish")):  # rendered by bench_publish
        parts.append(sections[name]["markdown"])
    if "local" in sections:
        parts.append(markdown(sections["local"]).replace("# Scale-out: one", "## Local model: one", 1))
    return "\n".join(parts)


def load_sections(out: Path) -> dict[str, Any]:
    """The sections of the last runs (a flat report of an older run is the `local` section)."""
    path = out.with_suffix(".json")
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data if "runs" not in data else {"local": data}


def save_section(out: Path, name: str, report: dict[str, Any]) -> None:
    """Store one section's report beside the others and rewrite scale.md from them all."""
    sections = load_sections(out)
    sections[name] = report
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(sections, indent=2, sort_keys=True))
    out.write_text(compose(sections), encoding="utf-8")
    print(compose(sections))


def busy_seconds(run: dict[str, Any]) -> float:
    """Seconds of the run in which some step was running (the union of the steps' spans)."""
    spans = sorted((v["start"], v["start"] + v["seconds"]) for v in run["steps"].values())
    total, reach = 0.0, float("-inf")
    for begin, end in spans:
        total += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    return total


def endpoint_reading(runs: list[dict[str, Any]], latency: float) -> str:
    """What the runs show: the whole run's and the embedding phase's ratios, and where the time that a
    second worker cannot share went (the run's start, the hand-offs between steps, the chain of steps
    around the parts)."""
    one, two = runs[0], runs[-1]

    def parts(run: dict[str, Any]) -> list[float]:
        return [v["seconds"] for k, v in run["steps"].items() if k.startswith("embeddings_part")]

    phase = one["embedding_phase_seconds"] / max(two["embedding_phase_seconds"], 1e-9)
    whole = one["wall_seconds"] / two["wall_seconds"]
    mean_one, mean_two = sum(parts(one)) / len(parts(one)), sum(parts(two)) / len(parts(two))
    text = (
        f"Two workers ran the whole build {whole:.2f}x faster than one (wall time, the ratio the goal is "
        f"about) and its embedding phase (first part's start to the `embeddings` step's end) {phase:.2f}x. "
        f"**The goal of 1.7x for the whole run was {'met' if whole >= 1.7 else 'not met'}.** "
        f"The parts ran at once on two workers, {mean_two:.1f} s each on average against {mean_one:.1f} s one "
        f"after the other on one ({latency * 1000:.0f} ms waits on the server plus CPU work on the same 2 shared "
        "cores)."
    )
    if not all("start" in v for run in (one, two) for v in run["steps"].values()):
        return text  # an older run, without the steps' start times
    lines = []
    for run in (one, two):
        steps = run["steps"]
        chain = sum(v["seconds"] for k, v in steps.items() if not k.startswith("embeddings_part"))
        startup = run["wall_seconds"] - run["run_seconds"]
        idle = run["run_seconds"] - busy_seconds(run)
        lines.append((startup, idle, chain, sum(parts(run)) if run is one else max(parts(run))))
    (s1, i1, c1, p1), (s2, i2, c2, p2) = lines
    bm25 = two["steps"].get("bm25", {})
    beside = any(
        v["start"] < bm25.get("start", 0) + bm25.get("seconds", 0)
        and bm25.get("start", 0) < v["start"] + v["seconds"]
        for k, v in two["steps"].items()
        if k.startswith("embeddings_part")
    )
    return text + (
        f" Where the wall time went, one worker | two: the `dagster asset materialize` process before the run "
        f"started {s1:.1f} | {s2:.1f} s; no step running (hand-offs: the executor polls once a second for a "
        f"finished step, then a worker picks up and starts the next) {i1:.1f} | {i2:.1f} s; "
        f"the other steps (documents, chunks, bm25, embeddings, index) {c1:.1f} | {c2:.1f} s of step time; "
        f"the parts {p1:.1f} | {p2:.1f} s (their sum | the longer). bm25 ran "
        + ("beside a part on two workers" if beside else "on its own, not beside a part, on two workers")
        + ". Only the parts' time is shared by a second worker; the rest (the run's start, the hand-offs and "
        f"the chain documents -> chunks, then embeddings -> publish) is not, {two['wall_seconds'] - p2:.1f} s of the "
        f"two-worker run. Had the parts halved exactly ({p1 / 2:.1f} s), the whole run would have been "
        f"{one['wall_seconds'] / (two['wall_seconds'] - p2 + p1 / 2):.2f}x."
    )
