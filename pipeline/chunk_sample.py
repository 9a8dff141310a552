"""A few documents' chunks as Markdown for the chunks asset's metadata (the UI): `chunk_sample`.

The documents this run re-chunked (their staged chunks) or, when it re-chunked none, the published
index's; the first `SAMPLE_DOCUMENTS` of them, each chunk's span, length, pages and first words, and
a pointer to `chunkyard chunks DOC` for every other document.
"""

from __future__ import annotations

from typing import Any

from chunkyard.chunking.locations import location_parts
from chunkyard.retrieval.store.documents import DocumentChunk
from chunkyard.retrieval.store.integrity import ChunkSample

SAMPLE_DOCUMENTS = 3  # documents shown
SAMPLE_CHUNKS = 20  # chunks shown per document
FIRST_WORDS = 8


def where(metadata: dict[str, Any]) -> str:
    """`2-3` pages, `slide 4`, or the heading path; `-` when the format has none."""
    return ", ".join(location_parts(metadata)) or "-"


def first_words(text: str) -> str:
    """The chunk's first words on one line, safe inside a Markdown table cell."""
    words = text.split()
    shown = " ".join(words[:FIRST_WORDS]) + (" …" if len(words) > FIRST_WORDS else "")
    return shown.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def _table(doc_id: str, chunks: list[DocumentChunk]) -> list[str]:
    lines = [
        f"**{first_words(doc_id)}**: {len(chunks)} chunk{'s' if len(chunks) != 1 else ''}",
        "",
        "| # | span | characters | where | first words |",
        "| ---: | --- | ---: | --- | --- |",
    ]
    lines += [
        f"| {n} | {c.start}:{c.end} | {c.end - c.start} | {where(c.metadata)} | {first_words(c.text)} |"
        for n, c in enumerate(chunks[:SAMPLE_CHUNKS], 1)
    ]
    if len(chunks) > SAMPLE_CHUNKS:
        lines.append(f"| … | {len(chunks) - SAMPLE_CHUNKS} more | | | |")
    return [*lines, ""]


WHAT = {"staged": "re-chunked by this run", "published": "in the published index"}


def chunk_sample(sample: ChunkSample, index_name: str) -> str:
    """The Markdown of `sample` (read by `integrity.sampled_chunks`, `SAMPLE_DOCUMENTS` documents): the
    first documents this run re-chunked (staged), else the published index's."""
    if sample.source not in WHAT:
        return "No chunks: the index has no documents yet."
    lines = [f"Chunks of {len(sample.chunks)} of the {sample.documents} documents {WHAT[sample.source]}:", ""]
    for doc_id, chunks in sample.chunks.items():
        lines += _table(doc_id, chunks)
    lines.append(
        f"Any document's chunks, with where each was cut: `chunkyard chunks DOC --index {index_name}`"
    )
    return "\n".join(lines)
