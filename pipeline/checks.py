"""Integrity checks of the index steps: read-only queries over the store's tables, judged here.

Each function returns a `Check` (name, passed, metadata); a step reports its checks and the
Dagster assets only turn them into `AssetCheckResult`s. The staged variants check what this run
produced (before publish); the published variants check the whole index readers see. Each judges
what a step read before with `retrieval.store.integrity` (its SQL), and reads the store no more.
`CHECKS` declares the evaluation's and the promotion's; each index step declares its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from chunkyard.retrieval.store import integrity

Metadata = dict[str, int | float | str]


@dataclass(frozen=True)
class Check:
    """The outcome of one integrity check; `warn` checks flag, `error` checks fail."""

    name: str
    passed: bool
    metadata: Metadata = field(default_factory=dict)
    severity: str = "error"


@dataclass(frozen=True)
class DeclaredCheck:
    """A check a step runs: its name, what it asserts and how serious a failure is."""

    name: str
    description: str
    severity: str = "error"


# The checks of the evaluation and promotion assets (the assets declare them up front from this
# table); each index step declares its own beside its code (`CHECKS` in `pipeline.steps.<step>`).
CHECKS: dict[str, tuple[DeclaredCheck, ...]] = {
    "evaluation": (
        DeclaredCheck("no_regression", "Warns when a metric drops vs the previous evaluation.", "warn"),
    ),
    "promotion": (
        DeclaredCheck(
            "no_regression",
            "Blocks the alias swap when the winner scores more than serve.max_regression below the "
            "alias's current target.",
        ),
        DeclaredCheck("within_budget", "Some (config, variant) is within the collection's serve.budget."),
    ),
}


class TokenCounter(Protocol):
    def count_batch(self, texts: list[str]) -> list[int]: ...


SAMPLE = integrity.SAMPLE  # offending rows listed in a failed check's metadata


def check_spans(spans: integrity.Spans) -> Check:
    """Every chunk's text equals its document's text[start:end].

    Linear in what it checks: the chunks stream in document order in batches of `integrity.SPAN_BATCH`,
    and the texts of a batch's documents are read in one round trip (each document once) and sliced
    in Python. Slicing in SQL with substr() per chunk decompressed the TOAST-ed text again for every
    chunk, quadratic on a large document. Memory holds one batch of chunks and their documents.

    Scoped to `doc_ids` (published checks after an incremental publish), it checks only those
    documents' chunks, and for every other document of the index that its stored sha256 still equals
    the one the index was built from: their chunks were checked when they were published and their
    text has not changed since, so the whole index is covered without reading it.
    """
    total = mismatches = 0
    examples: list[str] = []
    for batch in spans.batches:
        for doc_id, start, end, chunk_text in batch.rows:
            total += 1
            text = batch.texts.get(doc_id)
            missing = text is None
            if missing or start < 0 or end <= start or end > len(text) or text[start:end] != chunk_text:
                mismatches += 1
                if len(examples) < SAMPLE:
                    examples.append(f"{doc_id}[{start}:{end}]" + (" (document missing)" if missing else ""))
    stale = spans.changed_since_indexed
    examples += [f"{d} (text changed since it was indexed)" for d in stale[:SAMPLE]]
    metadata: Metadata = {"chunks_checked": total, "span_mismatches": mismatches}
    if spans.doc_ids is not None:
        metadata["documents_checked"] = len(spans.doc_ids)
        metadata["documents_changed_since_indexed"] = len(stale)
    if examples:
        metadata["examples"] = "; ".join(examples[:SAMPLE])
    name = "spans_match_documents" if spans.where == "staged" else "published_spans_match"
    return Check(name, mismatches == 0 and not stale, metadata)


def check_no_empty_chunks(empty: integrity.EmptyChunks) -> Check:
    """No chunk is empty or whitespace only (it would embed to noise and match nothing)."""
    metadata: Metadata = {
        "chunks_checked": empty.chunks,
        "empty_chunks": empty.empty,
        "scope": f"{empty.where} chunks",
    }
    if empty.examples:
        metadata["examples"] = "; ".join(f"{d}[{s}:{e}]" for d, s, e in empty.examples)
    return Check("no_empty_chunks", empty.empty == 0, metadata)


def check_token_limit(
    texts: integrity.EmbedTexts, tokenizer: TokenCounter, limit: int, *, allow_truncation: bool
) -> Check:
    """No chunk's embed_text exceeds the model's input limit (counted with the model's tokenizer).

    When the config allows truncation, the check passes and reports the share that the model
    will truncate.
    """
    total = over = longest = 0
    examples: list[str] = []
    for rows in texts.batches:
        counts = tokenizer.count_batch([r[3] for r in rows])
        for (doc, s, e, _), n in zip(rows, counts, strict=True):
            total += 1
            longest = max(longest, n)
            if n > limit:
                over += 1
                if len(examples) < SAMPLE:
                    examples.append(f"{doc}[{s}:{e}] {n} tokens")
    metadata: Metadata = {
        "chunks_checked": total,
        "model_token_limit": int(limit),
        "longest_chunk_tokens": int(longest),
        "chunks_over_limit": over,
        "share_truncated": float(over / total) if total else 0.0,
        "truncation_allowed": bool(allow_truncation),
        "scope": f"{texts.where} chunks",
    }
    if examples:
        metadata["examples"] = "; ".join(examples)
    return Check("within_model_token_limit", over == 0 or allow_truncation, metadata)


def check_staged_embeddings(counts: integrity.StagedEmbeddingCounts) -> Check:
    """Every staged chunk has exactly one staged vector, of the model's dimension."""
    missing, wrong_dim = counts.chunks_without_vector, counts.vectors_with_wrong_dims
    metadata: Metadata = {
        "chunks": counts.chunks,
        "vectors": counts.vectors,
        "chunks_without_vector": missing,
        "vectors_with_wrong_dims": wrong_dim,
        "expected_dims": counts.expected_dims,
    }
    return Check(
        "one_vector_per_chunk", missing == 0 and wrong_dim == 0 and counts.vectors == counts.chunks, metadata
    )


def check_published_embeddings(counts: integrity.PublishedEmbeddingCounts) -> Check:
    """Every published chunk has a vector of the model's dimension.

    Scoped to the documents written (after an incremental publish), it checks only those documents'
    chunks: the others were checked when they were published, and publish refuses staged vectors of
    another dimension, so a one-document update does not scan the whole partition.
    """
    missing, wrong_dim = counts.chunks_without_vector, counts.vectors_with_wrong_dims
    if counts.distinct_dims > 1:
        wrong_dim = max(wrong_dim, 1)
    metadata: Metadata = {
        "chunks": counts.chunks,
        "chunks_without_vector": missing,
        "vectors_with_wrong_dims": wrong_dim,
        "expected_dims": counts.expected_dims,
        "scope": "documents written" if counts.scoped else "whole index",
    }
    return Check("published_vectors", missing == 0 and wrong_dim == 0, metadata)


def check_bm25_counts(counts: integrity.Bm25Counts) -> Check:
    """The BM25 index's document count and total length equal the published chunks' (one scan).

    An incremental publish adjusts both by what it removes and adds, so this also catches drift.
    """
    n_docs, total_length = int(counts.bm25_documents or 0), int(counts.bm25_total_length or 0)
    metadata: Metadata = {
        "chunks": counts.chunks,
        "bm25_documents": n_docs,
        "chunks_with_terms": counts.chunks_with_terms,
        "chunks_total_length": counts.chunks_total_length,
        "bm25_total_length": total_length,
    }
    passed = n_docs == counts.chunks and total_length == counts.chunks_total_length
    return Check("bm25_count_matches_chunks", passed, metadata)


def regression(current: dict[str, float], previous: dict[str, float], tolerance: float = 0.01) -> Check:
    """Compare evaluation metrics with the previous evaluation: any drop beyond `tolerance` fails."""
    drops = {
        key: float(current[key] - previous[key])
        for key in sorted(current)
        if key in previous and current[key] < previous[key] - tolerance
    }
    metadata: Metadata = {
        "metrics_compared": len(set(current) & set(previous)),
        "metrics_dropped": len(drops),
        "tolerance": float(tolerance),
    }
    if drops:
        metadata["drops"] = "; ".join(f"{k}: {v:+.4f}" for k, v in drops.items())
        metadata["largest_drop"] = float(min(drops.values()))
    return Check("no_regression", not drops, metadata, severity="warn")
