"""Integrity checks of the index steps: read-only queries over the store's tables, judged here.

Each function returns a `Check` (name, passed, metadata); a step reports its checks and the
Dagster assets only turn them into `AssetCheckResult`s. The staged variants check what this run
produced (before publish); the published variants check the whole index readers see. The SQL
lives in `retrieval.store.integrity`.
`CHECKS` declares the evaluation's and the promotion's; each index step declares its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from chunkyard.retrieval.store import Store, documents, integrity

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


SAMPLE = 10  # offending rows listed in a failed check's metadata


def _table(where: str) -> str:
    if where not in integrity.CHUNK_TABLES:
        raise ValueError(f"where: expected 'staged' or 'published', got {where!r}")
    return integrity.CHUNK_TABLES[where]


SPAN_BATCH = 5000  # chunks fetched per round trip by the span check


def check_spans(
    store: Store,
    collection: str,
    index_name: str,
    where: str = "staged",
    *,
    doc_ids: Sequence[str] | None = None,
) -> Check:
    """Every chunk's text equals its document's text[start:end].

    Linear in what it checks: the chunks stream in document order in batches of SPAN_BATCH, and the
    texts of a batch's documents are read in one round trip (each document once) and sliced in
    Python. Slicing in SQL with substr() per chunk decompressed the TOAST-ed text again for every
    chunk, quadratic on a large document. Memory holds one batch of chunks and their documents.

    `doc_ids` (published checks after an incremental publish) checks only those documents' chunks,
    and for every other document of the index that its stored sha256 still equals the one the index
    was built from: their chunks were checked when they were published and their text has not
    changed since, so the whole index is covered without reading it.
    """
    table = _table(where)
    total = mismatches = stale = 0
    examples: list[str] = []
    with store.connection() as conn, conn.transaction():
        texts: dict[str, str] = {}
        for rows in integrity.span_batches(conn, table, index_name, doc_ids, SPAN_BATCH):
            # Chunks come in document order: only the batch's last document can continue in the next.
            texts = {d: t for d, t in texts.items() if d == rows[0][0]}
            wanted = sorted({r[0] for r in rows} - texts.keys())
            if wanted:
                texts.update(documents.document_texts(conn, collection, wanted))
            for doc_id, start, end, chunk_text in rows:
                total += 1
                text = texts.get(doc_id)
                missing = text is None
                if missing or start < 0 or end <= start or end > len(text) or text[start:end] != chunk_text:
                    mismatches += 1
                    if len(examples) < SAMPLE:
                        examples.append(
                            f"{doc_id}[{start}:{end}]" + (" (document missing)" if missing else "")
                        )
        if doc_ids is not None:
            stale_ids = documents.changed_since_indexed(conn, collection, index_name, doc_ids)
            stale = len(stale_ids)
            examples += [f"{d} (text changed since it was indexed)" for d in stale_ids[:SAMPLE]]
    metadata: Metadata = {"chunks_checked": total, "span_mismatches": mismatches}
    if doc_ids is not None:
        metadata["documents_checked"] = len(doc_ids)
        metadata["documents_changed_since_indexed"] = stale
    if examples:
        metadata["examples"] = "; ".join(examples[:SAMPLE])
    name = "spans_match_documents" if where == "staged" else "published_spans_match"
    return Check(name, mismatches == 0 and stale == 0, metadata)


def check_no_empty_chunks(store: Store, index_name: str, where: str = "staged") -> Check:
    """No chunk is empty or whitespace only (it would embed to noise and match nothing)."""
    table = _table(where)
    with store.connection() as conn:
        total, empty = integrity.empty_chunks(conn, table, index_name)
        examples = []
        if empty:
            examples = integrity.empty_chunk_spans(conn, table, index_name, SAMPLE)
    metadata: Metadata = {
        "chunks_checked": int(total),
        "empty_chunks": int(empty),
        "scope": f"{where} chunks",
    }
    if examples:
        metadata["examples"] = "; ".join(f"{d}[{s}:{e}]" for d, s, e in examples)
    return Check("no_empty_chunks", empty == 0, metadata)


def check_token_limit(
    store: Store,
    index_name: str,
    tokenizer: TokenCounter,
    limit: int,
    *,
    allow_truncation: bool,
    where: str = "staged",
    batch: int = 2000,
) -> Check:
    """No chunk's embed_text exceeds the model's input limit (counted with the model's tokenizer).

    When the config allows truncation, the check passes and reports the share that the model
    will truncate.
    """
    table = _table(where)
    total = over = longest = 0
    examples: list[str] = []
    with store.connection() as conn:
        for rows in integrity.embed_text_batches(conn, table, index_name, batch):
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
        "scope": f"{where} chunks",
    }
    if examples:
        metadata["examples"] = "; ".join(examples)
    return Check("within_model_token_limit", over == 0 or allow_truncation, metadata)


def check_staged_embeddings(store: Store, index_name: str, dim: int) -> Check:
    """Every staged chunk has exactly one staged vector, of the model's dimension."""
    with store.connection() as conn:
        chunks, missing, vectors, wrong_dim = integrity.staged_embedding_counts(conn, index_name, dim)
    metadata: Metadata = {
        "chunks": int(chunks),
        "vectors": int(vectors),
        "chunks_without_vector": int(missing),
        "vectors_with_wrong_dims": int(wrong_dim),
        "expected_dims": int(dim),
    }
    return Check("one_vector_per_chunk", missing == 0 and wrong_dim == 0 and vectors == chunks, metadata)


def check_published_embeddings(
    store: Store, index_name: str, dim: int, *, doc_ids: Sequence[str] | None = None
) -> Check:
    """Every published chunk has a vector of the model's dimension.

    `doc_ids` (after an incremental publish) checks only those documents' chunks: the others were
    checked when they were published, and publish refuses staged vectors of another dimension, so a
    one-document update does not scan the whole partition.
    """
    with store.connection() as conn:
        chunks, missing, wrong_dim, dims = integrity.published_embedding_counts(
            conn, index_name, dim, doc_ids
        )
    if dims > 1:
        wrong_dim = max(int(wrong_dim), 1)
    metadata: Metadata = {
        "chunks": int(chunks),
        "chunks_without_vector": int(missing),
        "vectors_with_wrong_dims": int(wrong_dim),
        "expected_dims": int(dim),
        "scope": "documents written" if doc_ids is not None else "whole index",
    }
    return Check("published_vectors", missing == 0 and wrong_dim == 0, metadata)


def check_bm25_counts(store: Store, index_name: str) -> Check:
    """The BM25 index's document count and total length equal the published chunks' (one scan).

    An incremental publish adjusts both by what it removes and adds, so this also catches drift.
    """
    with store.connection() as conn:
        chunks, with_length, length, n_docs, total_length = integrity.bm25_counts(conn, index_name)
    n_docs, total_length = int(n_docs or 0), int(total_length or 0)
    metadata = {
        "chunks": int(chunks),
        "bm25_documents": n_docs,
        "chunks_with_terms": int(with_length),
        "chunks_total_length": int(length),
        "bm25_total_length": total_length,
    }
    return Check("bm25_count_matches_chunks", n_docs == chunks and total_length == length, metadata)


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


def staged_documents(store: Store, index_name: str) -> dict[str, list[str]]:
    """Which documents this run re-chunked (staged chunks) and which it removes (staged removals)."""
    with store.connection() as conn:
        chunked = integrity.staged_chunked_documents(conn, index_name)
        removed = integrity.staged_removed_documents(conn, index_name)
    return {"chunked": chunked, "removed": removed}
