"""Step `bm25`: term frequencies and lengths of the staged chunks, for the inverted index."""

from __future__ import annotations

from chunkyard.pipeline.step_report import StepReport, StepRun
from chunkyard.retrieval.embedders.embedder import Embedder
from chunkyard.retrieval.indexing.bm25 import stage_bm25
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store

# Bump when this module, `retrieval.indexing.bm25` or the BM25 analysis it runs (`retrieval.lexical.analysis`,
# `retrieval.lexical.languages`) changes the postings it stages.
CODE_VERSION = "1"


def step_bm25(store: Store, spec: IndexSpec, embedder: Embedder | None, run: StepRun) -> StepReport:
    """Stage the BM25 postings of every staged chunk, as run `run.owner` (progress in chunks); no check
    of its own (the publish checks the counts)."""
    staged = stage_bm25(store, spec, owner=run.owner, progress=run.progress)
    return StepReport(metadata=dict(staged.as_metadata()), stage=staged)
