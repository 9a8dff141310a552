"""Stage 2: a vector for every staged chunk, from the embedding cache or computed and cached."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
from chunkyard.retrieval.indexing.stage_reports import EmbeddingStageReport, IndexingError
from chunkyard.retrieval.indexing.staging import analyze_staged, check_run
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store import staging as staging_rows

if TYPE_CHECKING:
    from chunkyard.retrieval.embedders.embedder import Embedder

# One batch is one model call (the ONNX encoder's own budget: 2,048 padded tokens, 8 chunks of 256):
# each is cached and counted as soon as it is embedded, so Ctrl-C or a crash loses at most one batch
# (a few seconds of the multilingual model) and the progress line moves every batch.
EMBED_BATCH = 32  # at most this many texts per embedding + cache round trip
EMBED_BATCH_TOKENS = 2048  # and at most this many padded model tokens (texts x the longest)


def token_batches(hashes: list[str], tokens: dict[str, int], prompt_tokens: int = 0) -> list[list[str]]:
    """`hashes` longest first, cut into batches of at most EMBED_BATCH texts and EMBED_BATCH_TOKENS
    padded tokens (the batch's size times its first, longest text); a text over the budget goes alone.

    Sorted across all documents, so each batch pads to nearly equal lengths. `prompt_tokens`: what the
    model's document prompt (e5's `passage: `) adds to every text, so a batch is one call as the
    encoder counts it.
    """
    ordered = sorted(hashes, key=lambda h: -tokens.get(h, 0))
    padded = [max(tokens.get(h, 0), 1) + prompt_tokens for h in ordered]
    batches: list[list[str]] = []
    current: list[str] = []
    longest = 0
    for content_hash, size in zip(ordered, padded, strict=True):
        if current and (len(current) >= EMBED_BATCH or (len(current) + 1) * longest > EMBED_BATCH_TOKENS):
            batches.append(current)
            current = []
        if not current:
            longest = size
        current.append(content_hash)
    if current:
        batches.append(current)
    return batches


def prompt_tokens(embedder: Embedder) -> int:
    """The tokens the model's document prompt adds to each text (0 without one)."""
    prefix = (getattr(embedder, "prompts", None) or {}).get("document") or ""
    if not prefix:
        return 0
    with_prompt, without = embedder.tokenizer.count_batch([prefix, ""])
    return max(int(with_prompt) - int(without), 0)


def _computed(
    embedder: Embedder,
    missing: list[str],
    texts_by_hash: dict[str, str],
    tokens: dict[str, int],
) -> Iterator[tuple[list[str], np.ndarray]]:
    """(content hashes, vectors) per model call, or per request as an embedding server answers
    (`embed_stream`): each answer is cached at once, so a kill loses only unanswered requests."""
    stream = getattr(embedder, "embed_stream", None)
    if stream is None:
        for batch in token_batches(missing, tokens, prompt_tokens(embedder)):
            yield batch, embedder.embed([texts_by_hash[h] for h in batch])
        return
    texts = [texts_by_hash[h] for h in missing]
    requests = embedder.request_batches([tokens.get(h, 0) for h in missing])
    for positions, vectors in stream(texts, requests):
        yield [missing[i] for i in positions], vectors


class _CacheWriter:
    """Embedding-cache writes in a thread, each in one transaction with every answer queued since the
    last: an answer is durable soon after it arrives (a killed build resumes without it), and a fast
    embedding server does not wait on a commit per request. `close` waits and re-raises a failure."""

    def __init__(self, store: Store, model_id: str) -> None:
        self._store, self._model_id = store, model_id
        self._queue: queue.SimpleQueue[dict[str, np.ndarray] | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="embedding-cache", daemon=True)
        self._thread.start()

    def put(self, vectors: dict[str, np.ndarray]) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(vectors)

    def close(self, reraise: bool = True) -> None:
        self._queue.put(None)
        self._thread.join()
        if reraise and self._error is not None:
            raise self._error

    def _run(self) -> None:
        done = False
        while not done:
            merged: dict[str, np.ndarray] = {}
            item = self._queue.get()
            while item is not None:
                merged.update(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            done = item is None
            if merged and self._error is None:
                try:
                    self._store.embedding_cache.add(self._model_id, merged)
                except BaseException as exc:  # re-raised in the stage's thread
                    self._error = exc


def embed_and_cache(
    store: Store,
    embedder: Embedder,
    missing: list[str],
    texts_by_hash: dict[str, str],
    tokens: dict[str, int],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, np.ndarray], float]:
    """Vectors of the `missing` content hashes, each answer cached as it arrives; and the seconds spent
    waiting on the model or server. Shared by the whole stage and by one shard of it (`embed_shards`)."""
    vectors: dict[str, np.ndarray] = {}
    embed_seconds = 0.0
    computed = _computed(embedder, missing, texts_by_hash, tokens)
    # The cache writes run beside the embedding (psycopg releases the GIL), each taking every answer
    # that arrived during the one before.
    writer = _CacheWriter(store, embedder.model_id)
    try:
        while True:
            batch_started = time.perf_counter()
            answer = next(computed, None)
            embed_seconds += time.perf_counter() - batch_started
            if answer is None:
                break
            fresh = dict(zip(*answer, strict=True))
            writer.put(fresh)
            vectors.update(fresh)
            if progress is not None:  # `progress(done, total)` after each answer
                progress(len(vectors), len(missing))
    except BaseException:
        writer.close(reraise=False)  # what was answered before the failure is cached for the retry
        raise
    writer.close()
    return vectors, embed_seconds


def stage_embeddings(
    store: Store,
    spec: IndexSpec,
    embedder: Embedder,
    progress: Callable[[int, int], None] | None = None,
    *,
    owner: str | None = None,
) -> EmbeddingStageReport:
    """Vectors for every staged chunk: from the cache (model, content hash) or computed and cached.
    `progress(done, total)` is called after each answer of the model (the step's longest part).

    The vectors are written only while `owner` still owns the staging (checked under the row lock in
    the writing transaction): a run that re-staged meanwhile staged other texts for the same chunk ids.
    """
    from chunkyard.chunking.models import resolve_model_path

    started = time.perf_counter()
    index_name = spec.name
    model_path = getattr(embedder, "model_path", None)
    if model_path and resolve_model_path(spec.config.embedding_model) != model_path:
        raise IndexingError(
            f"stage_embeddings: index {index_name!r} uses {spec.config.embedding_model!r} but the "
            f"embedder is {embedder.model_id!r}"
        )
    report = EmbeddingStageReport(index=index_name, model_id=embedder.model_id)
    report.model_max_tokens = int(embedder.max_seq_length)
    with store.connection() as conn:
        inputs = staging_rows.start_embeddings(
            conn, index_name, owner, spec.config.config_hash, embedder.model_id
        )
        check_run("stage_embeddings", index_name, owner, inputs.run, spec.config.config_hash)
    report.embeddings_precomputed, pending = inputs.precomputed, inputs.pending
    report.chunks = len(pending) + report.embeddings_precomputed
    texts_by_hash: dict[str, str] = {}  # one text per content hash: never embedded twice in a run
    for _, content_hash, embed_text in pending:
        texts_by_hash.setdefault(content_hash, embed_text)
    tokens: dict[str, int] = {}
    if texts_by_hash:
        tokens = dict(
            zip(texts_by_hash, embedder.tokenizer.count_batch(list(texts_by_hash.values())), strict=True)
        )
        long_hashes = {h for h, n in tokens.items() if n > embedder.max_seq_length}
        report.chunks_longer_than_model_limit = sum(1 for _, h, _ in pending if h in long_hashes)
    lookup_started = time.perf_counter()
    vectors = store.embedding_cache.lookup(embedder.model_id, texts_by_hash)  # across runs and configs
    report.cache_lookup_seconds = round(time.perf_counter() - lookup_started, 3)
    missing = [h for h in texts_by_hash if h not in vectors]
    embed_started = time.perf_counter()
    usage_before = embedder.usage if hasattr(embedder, "usage") else None
    fresh, embed_seconds = embed_and_cache(store, embedder, missing, texts_by_hash, tokens, progress)
    vectors.update(fresh)
    if usage_before is not None:
        report.endpoint = embedder.usage.minus(usage_before).as_metadata()
    report.embeddings_computed = len(missing)
    report.tokens_embedded = sum(tokens.get(h, 0) for h in missing)
    report.embed_seconds = round(embed_seconds, 3)
    report.cache_write_wait_seconds = round(time.perf_counter() - embed_started - embed_seconds, 3)
    computed_hashes = set(missing)
    report.embeddings_reused = sum(1 for _, h, _ in pending if h not in computed_hashes)
    if missing:
        report.embeddings_per_second = round(len(missing) / max(time.perf_counter() - embed_started, 1e-9), 2)
        report.embed_tokens_per_second = round(report.tokens_embedded / max(embed_seconds, 1e-9), 1)
    write_started = time.perf_counter()
    with store.connection() as conn, conn.transaction(), conn.cursor() as cur:
        run = staging_rows.stage_vectors(  # still ours, its row locked until commit
            conn,
            cur,
            index_name,
            owner,
            ((index_name, chunk_id, vectors[content_hash]) for chunk_id, content_hash, _ in pending),
        )
        check_run("stage_embeddings", index_name, owner, run)
        analyze_staged(conn, len(pending), "staged_embeddings")
        report.stage_write_seconds = round(time.perf_counter() - write_started, 3)
        report.seconds = round(time.perf_counter() - started, 3)
        report.embedding_stage_seconds = report.seconds
        staging_rows.merge_run_report(conn, index_name, report.as_metadata())
    return report
