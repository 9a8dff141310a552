"""Step `embeddings`: a vector per staged chunk (content-hash cache across configs and runs)."""

from __future__ import annotations

from chunkyard.pipeline import checks
from chunkyard.pipeline.checks import DeclaredCheck
from chunkyard.pipeline.step_report import StepReport, StepRun
from chunkyard.retrieval.embedders.embedder import Embedder
from chunkyard.retrieval.indexing.embed_shards import embed_shard
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store, integrity

# Bump when this module, `retrieval.indexing.embeddings` or `retrieval.indexing.embed_shards` changes
# the vectors they stage (each embedder backend declares its own version).
CODE_VERSION = "1"

CHECKS = (
    DeclaredCheck("one_vector_per_chunk", "One embedding per staged chunk, with the model's dimensions."),
)


def step_embeddings(store: Store, spec: IndexSpec, embedder: Embedder | None, run: StepRun) -> StepReport:
    """Stage the vectors as run `run.owner` (`run.progress(done, total)` after each batch); check: one
    vector per staged chunk, of the model's dimension."""
    if embedder is None:
        raise ValueError(f"embedder: the embeddings step of {spec.name} needs one, got None")
    staged = stage_embeddings(store, spec, embedder, run.progress, owner=run.owner)
    documents = integrity.staged_documents(store, spec.name)
    counts = integrity.staged_embedding_counts(store, spec.name, embedder.dim) if run.checks else None
    return StepReport(
        metadata=dict(staged.as_metadata()),
        ids={"embedded_documents": documents.chunked},
        checks=[checks.check_staged_embeddings(counts)] if counts is not None else [],
        stage=staged,
    )


def embed_part(
    store: Store, spec: IndexSpec, embedder: Embedder, shard: int, shards: int, *, owner: str | None = None
) -> StepReport:
    """Fill the embedding cache for shard `shard` of `shards` as run `owner` (see
    `retrieval.indexing.embed_shards`); the `embeddings` step after every shard then stages the
    vectors without computing any."""
    report = embed_shard(store, spec, embedder, shard, shards, owner=owner)
    return StepReport(metadata=dict(report.as_metadata()))
