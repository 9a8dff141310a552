"""`chunkyard configs`: the index configs a collection can name, with model, languages, size and cost."""

from __future__ import annotations

import argparse
from typing import Any

# What each model reads and weighs (README, benchmarks/results/languages.md and embedder.md).
MODEL_FACTS = {
    "all-MiniLM-L6-v2": ("English", "23 MB int8"),
    "multilingual-e5-small": ("about 100 languages", "118 MB int8"),
}
# Chunks of 256 tokens embedded per second on 2 CPU threads, measured here (benchmarks/results/
# embedder.md: MiniLM torch 20.4, ONNX 24.0, ONNX int8 33.5, static 2,667; e5 int8 at 0.51x MiniLM int8).
EMBED_RATES = {
    ("all-MiniLM-L6-v2", "torch", None): 20.4,
    ("all-MiniLM-L6-v2", "onnx", None): 24.0,
    ("all-MiniLM-L6-v2", "onnx", "int8"): 33.5,
    ("all-MiniLM-L6-v2", "static", None): 2667.0,
    ("multilingual-e5-small", "onnx", "int8"): 17.1,
}
BENCHMARK_PREFIXES = ("chroma-", "eval-")  # configs of the report's benchmark runs: shown with --all


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    configs = sub.add_parser(
        "configs",
        help="list the index configs: model, languages, chunk size, what embedding costs",
        parents=[common],
    )
    configs.add_argument(
        "--all",
        action="store_true",
        help="also the benchmark configs (chroma-*, eval-*) of the measured reports",
    )


def cmd_configs(args: argparse.Namespace) -> int:
    from chunkyard.retrieval.settings.config import load_collections, load_index_configs
    from chunkyard.retrieval.settings.project import ProjectError

    configs = load_index_configs()
    try:
        collections = load_collections()
    except ProjectError:
        collections = {}
    used = {name for collection in collections.values() for name in collection.indexes}
    shown = [
        config
        for name, config in sorted(configs.items())
        if args.all or name in used or not name.startswith(BENCHMARK_PREFIXES)
    ]
    rows = [("config", "model (languages)", "chunks", "embedding", "description")]
    rows += [row(config, config.name in used) for config in shown]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for cells in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(cells[:4], widths, strict=True))
            + "  "
            + cells[4]
        )
    for line in inherited_lines(collections, configs):
        print(line)
    hidden = len(configs) - len(shown)
    print(
        "\n* used by a collection of this project. Name one with `chunkyard add NAME FOLDER --index CONFIG`;"
        " add your own under `indexes:` in chunkyard.yaml (`chunkyard check` checks it)."
        + (f" {hidden} benchmark configs more with --all." if hidden else "")
    )
    return 0


def inherited_lines(collections: dict[str, Any], configs: dict[str, Any]) -> list[str]:
    """A line per index a collection builds with its own model instead of the config's (the config
    names no `embedding_model`; `retrieval.settings.inherited_model`), saying where the model comes from."""
    from chunkyard.retrieval.settings.inherited_model import for_collection, inherited_note

    lines = []
    for collection in collections.values():
        for name in collection.indexes:
            if name not in configs:
                continue
            built = for_collection(configs[name], collection, configs)
            if built is not configs[name]:
                lines.append(
                    f"  {collection.name}/{name}: embedded by {built.embedding_model}{inherited_note(built)}"
                )
    return (["", "Models a collection chose for its configs:", *lines]) if lines else []


def row(config: Any, used: bool) -> tuple[str, str, str, str, str]:
    """One config as five cells: name, model and languages, chunk shape, embedding cost, description."""
    chunker = dict(config.chunker)
    unit = chunker.get("tokenizer", "model")
    size = f"{chunker.get('strategy')} {chunker.get('size', 256)} {unit} tokens"
    if chunker.get("overlap"):
        size += f", overlap {chunker['overlap']}"
    embedder = dict(config.embedder)
    backend = embedder.get("backend", "torch")
    if backend == "openai":
        model, cost = f"{embedder.get('model')} (an embedding server's)", "the server's"
    else:
        languages, weight = MODEL_FACTS.get(config.embedding_model, ("see the model", ""))
        model = f"{config.embedding_model} ({languages})"
        rate = EMBED_RATES.get((config.embedding_model, backend, embedder.get("quantize")))
        quantized = f" {embedder['quantize']}" if embedder.get("quantize") else ""
        cost = (
            f"{backend}{quantized}"
            + (f", ~{rate:g} chunks/s" if rate else "")
            + (f", {weight}" if weight and embedder.get("quantize") == "int8" else "")
        )
    description = " ".join(str(config.description or "").split())
    if len(description) > 70:
        description = description[:67] + "..."
    return (("* " if used else "  ") + config.name, model, size, cost, description)
