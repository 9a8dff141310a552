"""The cost of embedding one model call at a time (issue 39): the embedding stage's batches before and after.

The same chunks (the 15-file multilingual folder of `bench_first_day`, cut as `recursive-256-multilingual`
cuts it), embedded by multilingual-e5-small (ONNX int8) in the batches `token_batches` makes with the
old limits (256 texts, 32,768 tokens: one batch here) and the new (32 texts, 2,048 padded tokens: one
model call), the two alternating for `--rounds` rounds; the medians and their ratio. The model calls are
the same shapes either way (the encoder cuts at 2,048 padded tokens itself); what differs is the calls
from the stage to the model, each followed by a cache write and a progress count.

`python -m benchmarks.bench_embed_batches` writes benchmarks/results/embed_batches.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from chunkyard.chunking.registry import build_chunker
from chunkyard.chunking.types import Document
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.retrieval.indexing import embeddings

from benchmarks.bench_first_day import RESULTS, folder

MODEL = "multilingual-e5-small"
LIMITS = {"old": (256, 32768), "new": (32, 2048)}


def texts() -> list[str]:
    chunker = build_chunker(
        {"strategy": "recursive", "size": 256, "overlap": 0, "tokenizer": "model", "model": MODEL}
    )
    out = []
    with tempfile.TemporaryDirectory() as scratch:
        for path in sorted(folder(Path(scratch)).rglob("*.md")):
            document = Document(path.name, path.read_text(encoding="utf-8"))
            out += [chunk.text for chunk in chunker.chunk(document)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS / "embed_batches.md")
    args = parser.parse_args()
    embedder = load_embedder(MODEL, backend="onnx", quantize="int8")
    chunks = texts()
    hashes = [f"h{i}" for i in range(len(chunks))]
    by_hash = dict(zip(hashes, chunks, strict=True))
    tokens = dict(zip(hashes, embedder.tokenizer.count_batch(chunks), strict=True))
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    calls: dict[str, int] = {}
    for _ in range(args.rounds):
        for label, (texts_limit, tokens_limit) in LIMITS.items():
            embeddings.EMBED_BATCH, embeddings.EMBED_BATCH_TOKENS = texts_limit, tokens_limit
            batches = embeddings.token_batches(hashes, tokens, embeddings.prompt_tokens(embedder))
            calls[label] = len(batches)
            started = time.perf_counter()
            for batch in batches:
                embedder.embed([by_hash[h] for h in batch])
            seconds[label].append(time.perf_counter() - started)
    load_after = os.getloadavg()
    old, new = statistics.median(seconds["old"]), statistics.median(seconds["new"])
    lines = [
        "# Embedding one model call at a time",
        "",
        f"`python -m benchmarks.bench_embed_batches --rounds {args.rounds}`: {len(chunks)} chunks of the 15-file "
        f"multilingual folder, {MODEL} ONNX int8, 2 cores shared with other jobs, load average "
        f"{', '.join(f'{x:.1f}' for x in load_before)} before and {', '.join(f'{x:.1f}' for x in load_after)} "
        "after; the two batchings alternating.",
        "",
        "| batches | stage calls | median s | rounds, s |",
        "| --- | ---: | ---: | --- |",
        f"| old: 256 texts, 32,768 tokens | {calls['old']} | {old:.2f} | {', '.join(f'{s:.2f}' for s in seconds['old'])} |",
        f"| new: 32 texts, 2,048 padded tokens | {calls['new']} | {new:.2f} | {', '.join(f'{s:.2f}' for s in seconds['new'])} |",
        "",
        f"new / old: {new / old:.2f}x the time.",
        "",
    ]
    args.output.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
