"""The index steps declared once: their order, what each reads, and the rule that checks stop them.

chunks -> embeddings + bm25 -> index (the atomic publish), as `retrieval.indexing.graph` declares
it (`build_index` runs the same graph). The Dagster assets take their dependencies from
`INDEX_STEPS` and declare every error-level check of these steps blocking; `run_index_steps`
runs the same steps in this order for `chunkyard eval`. On both paths a failed error-level check
stops every later step of that index, so a failed staged check leaves the previous version
published.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chunkyard.pipeline.checks import Check
from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.indexing.graph import INDEX_GRAPH, PUBLISH
from chunkyard.retrieval.telemetry import configure_tracing, span

if TYPE_CHECKING:
    from chunkyard.retrieval.config import IndexSpec
    from chunkyard.retrieval.embedder import Embedder
    from chunkyard.retrieval.store import Store


@dataclass(frozen=True)
class IndexStep:
    """One step of an index: its asset kind, the kinds it reads and its `pipeline.steps` function."""

    kind: str
    after: tuple[str, ...]
    function: str
    takes_embedder: bool  # passed the index's Embedder (chunks: only strategies that embed)

    def run(self, store: Store, spec: IndexSpec, embedder: Embedder | None) -> StepReport:
        """This step's function on one index (its module loads now: the code location stays light)."""
        step = getattr(importlib.import_module(f"chunkyard.pipeline.steps.{self.kind}"), self.function)
        configure_tracing()  # a run's process exports its step spans when OTEL_* asks for traces
        with span(f"index.{self.kind}", index=str(spec.name), step=self.kind):
            return step(store, spec, embedder) if self.takes_embedder else step(store, spec)


# The `pipeline.steps.<kind>` function of each stage of the graph (which adds its checks).
STEP_FUNCTIONS = {"chunks": "chunk", "embeddings": "embed", "bm25": "index_terms", "index": "publish_index"}
INDEX_STEPS: tuple[IndexStep, ...] = tuple(
    IndexStep(stage.kind, stage.after, STEP_FUNCTIONS[stage.kind], stage.takes_embedder)
    for stage in INDEX_GRAPH
)
INDEX_KINDS = tuple(step.kind for step in INDEX_STEPS)
__all__ = ["INDEX_KINDS", "INDEX_STEPS", "PUBLISH", "ChecksFailed", "IndexStep", "run_index_steps", "step"]


def step(kind: str) -> IndexStep:
    """The declared step of `kind`; an unknown kind is an error naming the known ones."""
    for declared in INDEX_STEPS:
        if declared.kind == kind:
            return declared
    raise ValueError(f"kind: expected one of {', '.join(INDEX_KINDS)}, got {kind!r}")


def blocks(kind: str, severity: str) -> bool:
    """Whether a failed check of this severity in a step of `kind` stops the steps after it."""
    return severity == "error" and kind in INDEX_KINDS


def blocking_failures(kind: str, report: StepReport) -> list[Check]:
    """The checks of one step's report that failed and stop the steps after it."""
    return [c for c in report.checks if not c.passed and blocks(kind, c.severity)]


class ChecksFailed(RuntimeError):
    """An error-level check failed: the index's later steps (the publish among them) did not run."""

    def __init__(self, index: str, kind: str, failed: list[Check], reports: dict[str, StepReport]) -> None:
        self.index, self.kind, self.failed, self.reports = index, kind, failed, reports
        stopped = "" if kind == PUBLISH else "; the previous version stays published"
        super().__init__(f"{index}: {kind} check(s) failed: {', '.join(c.name for c in failed)}{stopped}")


def run_index_steps(
    store: Store,
    spec: IndexSpec,
    embedder: Embedder,
    *,
    before: Callable[[IndexStep, dict[str, StepReport]], None] | None = None,
) -> dict[str, StepReport]:
    """Every index step in order, each report by kind; `before` is called ahead of each step.

    Raises `ChecksFailed` right after a step whose error-level check failed.
    """
    reports: dict[str, StepReport] = {}
    for declared in INDEX_STEPS:
        if before is not None:
            before(declared, reports)
        reports[declared.kind] = report = declared.run(store, spec, embedder)
        failed = blocking_failures(declared.kind, report)
        if failed:
            raise ChecksFailed(str(spec.name), declared.kind, failed, reports)
    return reports
