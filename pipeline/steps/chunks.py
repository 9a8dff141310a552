"""Step `chunks`: chunk added and changed documents into staging, then check the staged spans."""

from __future__ import annotations

from chunkyard.chunking.models import model_token_limit
from chunkyard.chunking.registry import needs_embedding_model
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.pipeline import checks
from chunkyard.pipeline.checks import DeclaredCheck
from chunkyard.pipeline.chunk_sample import SAMPLE_DOCUMENTS, chunk_sample
from chunkyard.pipeline.step_report import StepReport, StepRun
from chunkyard.retrieval.embedders.embedder import Embedder
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store, integrity

# Bump when this module or `retrieval.indexing.chunks` changes the chunks it stages (the strategies
# declare their own versions in `chunking.registry`).
CODE_VERSION = "1"

CHECKS = (
    DeclaredCheck("spans_match_documents", "Every chunk's text equals document.text[start:end]."),
    DeclaredCheck("no_empty_chunks", "No empty chunk."),
    DeclaredCheck(
        "within_model_token_limit",
        "No chunk longer than the embedding model's input limit, unless the config allows "
        "truncation (then the share truncated is reported).",
    ),
)


def needs_model(config: IndexConfig) -> bool:
    """Only strategies that embed while chunking need the model (and so torch) in this step."""
    return needs_embedding_model(config.chunker)


def step_chunks(store: Store, spec: IndexSpec, embedder: Embedder | None, run: StepRun) -> StepReport:
    """Stage the chunks as run `run.owner`; checks: exact spans, no empty chunk, within the model's input limit.

    With nothing re-chunked (an unchanged index), the chunk checks read the published chunks: a check
    that failed stays failed on the next run instead of passing over zero new chunks.
    """
    config = spec.config
    staged = stage_chunks(
        store, spec, embedding_model=embedder, chunker=run.chunker, owner=run.owner, progress=run.progress
    )
    # the step's reads, all before judging: what the run re-chunked, a few documents' chunks, and
    # what the checks judge (of the published chunks when nothing was re-chunked)
    documents = integrity.staged_documents(store, spec.name)
    sample = integrity.sampled_chunks(store, spec.name, documents.chunked, SAMPLE_DOCUMENTS)
    where = "staged" if documents.chunked else "published"
    reads = integrity.chunk_reads(store, spec.collection, spec.name, where) if run.checks else None
    report = StepReport(
        metadata=dict(staged.as_metadata()),
        ids={"rechunked_documents": documents.chunked, "removed_documents": documents.removed},
        # the UI's view of a few documents' chunks (`chunkyard chunks DOC` shows any one)
        markdown={"chunks_sample": chunk_sample(sample, spec.name)},
        stage=staged,
    )
    if reads is None:
        return report
    limit = embedder.max_seq_length if embedder is not None else model_token_limit(config.embedding_model)
    tokenizer = get_tokenizer("model", config.embedding_model)
    report.checks = [
        checks.check_spans(reads.spans),
        checks.check_no_empty_chunks(reads.empty),
        checks.check_token_limit(
            reads.embed_texts, tokenizer, limit, allow_truncation=config.allow_truncation
        ),
    ]
    return report
