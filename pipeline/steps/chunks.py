"""Step `chunks`: chunk added and changed documents into staging, then check the staged spans."""

from __future__ import annotations

from collections.abc import Callable

from chunkyard.chunking.models import model_token_limit
from chunkyard.chunking.registry import needs_embedding_model
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.pipeline import checks
from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.config import IndexConfig, IndexSpec
from chunkyard.retrieval.embedder import Embedder
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.store import Store


def needs_model(config: IndexConfig) -> bool:
    """Only strategies that embed while chunking need the model (and so torch) in this step."""
    return needs_embedding_model(config.chunker)


def chunk(
    store: Store,
    spec: IndexSpec,
    embedder: Embedder | None = None,
    *,
    owner: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> StepReport:
    """Stage the chunks as run `owner`; checks: exact spans, no empty chunk, within the model's input limit.

    With nothing re-chunked (an unchanged index), the chunk checks read the published chunks: a check
    that failed stays failed on the next run instead of passing over zero new chunks.
    """
    config = spec.config
    staged = stage_chunks(store, spec, embedding_model=embedder, owner=owner, progress=progress)
    limit = embedder.max_seq_length if embedder is not None else model_token_limit(config.embedding_model)
    documents = checks.staged_documents(store, spec.name)
    where = "staged" if documents["chunked"] else "published"
    return StepReport(
        metadata=dict(staged.as_metadata()),
        ids={"rechunked_documents": documents["chunked"], "removed_documents": documents["removed"]},
        checks=[
            checks.check_spans(store, spec.collection, spec.name, "staged"),
            checks.check_no_empty_chunks(store, spec.name, where),
            checks.check_token_limit(
                store,
                spec.name,
                get_tokenizer("model", config.embedding_model),
                limit,
                allow_truncation=config.allow_truncation,
                where=where,
            ),
        ],
    )
