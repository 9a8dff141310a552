"""What a pipeline step takes besides the index (`StepRun`) and what it hands back (`StepReport`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chunkyard.chunking.documents.folder import DocumentFailure
from chunkyard.pipeline.checks import Check

if TYPE_CHECKING:
    from chunkyard.chunking.base import BaseChunker
    from chunkyard.retrieval.indexing.stage_reports import (
        Bm25StageReport,
        ChunkStageReport,
        EmbeddingStageReport,
        PublishReport,
    )

    StageReport = ChunkStageReport | EmbeddingStageReport | Bm25StageReport | PublishReport

Scalar = int | float | str


@dataclass(frozen=True)
class StepRun:
    """How one index step runs: as run `owner` (who owns the staging), with `progress(done, total)`,
    with its checks or without (`checks=False`: `build_index` for scripts and tests), and with
    `chunker` in place of the one the index config names (chunks only)."""

    owner: str | None = None
    progress: Callable[[int, int], None] | None = None
    checks: bool = True
    chunker: BaseChunker | None = None


@dataclass
class StepReport:
    """One step's outcome, in plain values: the Dagster assets turn it into metadata and check
    results, `chunkyard eval` into its tables. Numbers stay numbers (the UI plots them).

    `failures`: the files that produced no document (the documents step's; None for other steps);
    `stage`: the indexing stage's own report (index steps), for callers that read its fields."""

    metadata: dict[str, Scalar] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)
    markdown: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failures: list[DocumentFailure] | None = None
    stage: StageReport | None = None
