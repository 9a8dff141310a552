"""Step `bm25`: term frequencies and lengths of the staged chunks, for the inverted index."""

from __future__ import annotations

from collections.abc import Callable

from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.config import IndexSpec
from chunkyard.retrieval.indexing.terms import stage_bm25
from chunkyard.retrieval.store import Store


def index_terms(
    store: Store,
    spec: IndexSpec,
    *,
    owner: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> StepReport:
    """Stage the BM25 postings of every staged chunk, as run `owner` (`progress(done, total)` in chunks)."""
    return StepReport(metadata=dict(stage_bm25(store, spec, owner=owner, progress=progress).as_metadata()))
