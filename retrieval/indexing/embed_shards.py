"""Stage 2 split for scale-out: shard k of n embeds (and caches) the staged texts whose content hash falls in k.

Several processes (Celery workers running one step each, or any other processes) can each take one
shard at once. A shard only fills the content-hash embedding cache; `stage_embeddings` runs after
every shard and then finds every vector cached, so it computes nothing and just stages them. The
shards split the distinct content hashes, so no text goes to two shards, and each shard looks the
cache up first: a shard re-run after a kill embeds only what its killed run had not cached.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chunkyard.retrieval.indexing.embeddings import embed_and_cache
from chunkyard.retrieval.indexing.stage_reports import IndexingError, flat_metadata
from chunkyard.retrieval.indexing.staging import check_run
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.staging import shard_inputs

if TYPE_CHECKING:
    from chunkyard.retrieval.embedders.embedder import Embedder

HASH_DIGITS = 7  # leading hex digits of the content hash that pick its shard (28 bits: a positive int4)


def shard_of(content_hash: str, shards: int) -> int:
    """The shard (0 .. shards-1) of a content hash; the same rule as the SQL of `store.staging.shard_texts`."""
    return int(content_hash[:HASH_DIGITS], 16) % shards


@dataclass
class ShardReport:
    index: str
    shard: int
    shards: int
    model_id: str = ""
    texts: int = 0  # distinct content hashes of this shard still to stage
    embeddings_cached_before: int = 0
    embeddings_computed: int = 0
    tokens_embedded: int = 0
    embed_seconds: float = 0.0
    seconds: float = 0.0
    endpoint: dict[str, int | float] = field(default_factory=dict)

    def as_metadata(self) -> dict[str, int | float | str]:
        return flat_metadata(self)


def embed_shard(
    store: Store,
    spec: IndexSpec,
    embedder: Embedder,
    shard: int,
    shards: int,
    *,
    owner: str | None = None,
) -> ShardReport:
    """Embed and cache the staged texts of shard `shard` of `shards` that the cache lacks; as run
    `owner` when given (a later run that re-staged the index stops this one)."""
    if shards < 1 or not 0 <= shard < shards:
        raise IndexingError(f"embed_shard: shard must be in 0..{shards - 1} of shards >= 1, got {shard}")
    started = time.perf_counter()
    index_name = str(spec.name)
    report = ShardReport(index=index_name, shard=shard, shards=shards, model_id=embedder.model_id)
    with store.connection() as conn:
        run, rows = shard_inputs(conn, index_name, owner, spec.config.config_hash, HASH_DIGITS, shards, shard)
        check_run("embed_shard", index_name, owner, run, spec.config.config_hash)
    texts_by_hash = {h: text for h, text in rows}
    report.texts = len(texts_by_hash)
    cached = store.embedding_cache.lookup(embedder.model_id, texts_by_hash)
    report.embeddings_cached_before = len(cached)
    missing = [h for h in texts_by_hash if h not in cached]
    if missing:
        counts = embedder.tokenizer.count_batch([texts_by_hash[h] for h in missing])
        tokens = dict(zip(missing, counts, strict=True))
        usage_before = embedder.usage if hasattr(embedder, "usage") else None
        _, embed_seconds = embed_and_cache(store, embedder, missing, texts_by_hash, tokens)
        if usage_before is not None:
            report.endpoint = embedder.usage.minus(usage_before).as_metadata()
        report.embeddings_computed = len(missing)
        report.tokens_embedded = sum(tokens.values())
        report.embed_seconds = round(embed_seconds, 3)
    report.seconds = round(time.perf_counter() - started, 3)
    return report
