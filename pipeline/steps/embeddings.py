"""Step `embeddings`: a vector per staged chunk (content-hash cache across configs and runs)."""

from __future__ import annotations

from collections.abc import Callable

from chunkyard.pipeline import checks
from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.config import IndexSpec
from chunkyard.retrieval.embedder import Embedder
from chunkyard.retrieval.indexing.embed_shards import embed_shard
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.store import Store


def embed(
    store: Store,
    spec: IndexSpec,
    embedder: Embedder,
    progress: Callable[[int, int], None] | None = None,
    *,
    owner: str | None = None,
) -> StepReport:
    """Stage the vectors as run `owner` (`progress(done, total)` after each batch); check: one vector
    per staged chunk, of the model's dimension."""
    staged = stage_embeddings(store, spec, embedder, progress, owner=owner)
    documents = checks.staged_documents(store, spec.name)
    return StepReport(
        metadata=dict(staged.as_metadata()),
        ids={"embedded_documents": documents["chunked"]},
        checks=[checks.check_staged_embeddings(store, spec.name, embedder.dim)],
    )


def embed_part(
    store: Store, spec: IndexSpec, embedder: Embedder, shard: int, shards: int, *, owner: str | None = None
) -> StepReport:
    """Fill the embedding cache for shard `shard` of `shards` as run `owner` (see
    `retrieval.indexing.embed_shards`); the `embeddings` step after every shard then stages the
    vectors without computing any."""
    report = embed_shard(store, spec, embedder, shard, shards, owner=owner)
    return StepReport(metadata=dict(report.as_metadata()))
