"""The index steps, declared once, and the one runner of them.

chunks -> embeddings + bm25 -> publish. Each `IndexStep` says what it reads, which function runs
it, its checks, the code version it declares and the config fields that shape it, and how it is
described and shown. The Dagster assets (`assets.indexes`) are made from this table, and Dagster
orders them by `reads`; `run_index_steps` runs the same table in its order for `chunkyard eval` and
`build_index`. On every path a failed error-level check stops the steps after it, so a failed
staged check leaves the previous version published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chunkyard.pipeline.checks import Check, DeclaredCheck
from chunkyard.pipeline.step_report import StepReport, StepRun
from chunkyard.pipeline.steps import bm25, chunks, embeddings, publish
from chunkyard.retrieval.embedders.embedder import Embedder
from chunkyard.retrieval.indexing.stage_reports import PublishReport
from chunkyard.retrieval.observability.telemetry import configure_tracing, span
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec
from chunkyard.retrieval.store import Store

StepFunction = Callable[[Store, IndexSpec, Embedder | None, StepRun], StepReport]


def _always(config: IndexConfig) -> bool:
    return True


def _never(config: IndexConfig) -> bool:
    return False


@dataclass(frozen=True)
class IndexStep:
    """One step of an index: what it is called everywhere (its asset key, its module
    `pipeline.steps.<name>`), the steps whose output it reads, its function, its checks and declared
    code version, the index config fields that shape its output, whether it is given the index's
    embedder, its progress unit and verb (`chunks embedded`), its kind tags and its description."""

    name: str
    reads: tuple[str, ...]
    function: StepFunction
    checks: tuple[DeclaredCheck, ...]
    code_version: str
    settings: tuple[str, ...]
    uses_embedder: Callable[[IndexConfig], bool]
    progress: tuple[str, str]
    kinds: frozenset[str]
    description: str


INDEX_STEPS: tuple[IndexStep, ...] = (
    IndexStep(
        name="chunks",
        reads=(),
        function=chunks.step_chunks,
        checks=chunks.CHECKS,
        code_version=chunks.CODE_VERSION,
        settings=("chunker", "embedding_model"),
        uses_embedder=chunks.needs_model,  # only strategies that embed while chunking
        progress=("documents", "chunked"),
        kinds=frozenset({"python", "postgres"}),
        description="Chunk set (staged; only added/changed documents are re-chunked)",
    ),
    IndexStep(
        name="embeddings",
        reads=("chunks",),
        function=embeddings.step_embeddings,
        checks=embeddings.CHECKS,
        code_version=embeddings.CODE_VERSION,
        settings=("chunker", "embedding_model", "embedder"),
        uses_embedder=_always,
        progress=("chunks", "embedded"),
        kinds=frozenset({"pgvector"}),  # and the backend that computes the vectors (`assets.indexes`)
        description="Embeddings of the staged chunks (content-hash cache across configs and runs)",
    ),
    IndexStep(
        name="bm25",
        reads=("chunks",),
        function=bm25.step_bm25,
        checks=(),
        code_version=bm25.CODE_VERSION,
        settings=("chunker", "embedding_model", "bm25"),
        uses_embedder=_never,
        progress=("chunks", "analysed"),
        kinds=frozenset({"python", "postgres"}),
        description="BM25 term frequencies of the staged chunks",
    ),
    IndexStep(
        name="publish",
        reads=("embeddings", "bm25"),
        function=publish.step_publish,
        checks=publish.CHECKS,
        code_version=publish.CODE_VERSION,
        settings=("chunker", "embedding_model", "embedder", "bm25"),
        uses_embedder=_never,
        progress=("phases", "published"),
        kinds=frozenset({"postgres"}),
        description="Atomic publish of staged chunks, vectors and postings (readers see old or new)",
    ),
)
STEP_NAMES = tuple(step.name for step in INDEX_STEPS)
PUBLISH = INDEX_STEPS[-1].name  # the last step: what readers see changes here
__all__ = [
    "INDEX_STEPS",
    "PUBLISH",
    "STEP_NAMES",
    "ChecksFailed",
    "IndexStep",
    "build_index",
    "run_index_steps",
    "run_step",
    "step",
]


def step(name: str) -> IndexStep:
    """The declared step called `name`; an unknown name is an error naming the known ones."""
    for declared in INDEX_STEPS:
        if declared.name == name:
            return declared
    raise ValueError(f"step: expected one of {', '.join(STEP_NAMES)}, got {name!r}")


def blocks(name: str, severity: str) -> bool:
    """Whether a failed check of this severity in the step (or asset) `name` stops the steps after it."""
    return severity == "error" and name in STEP_NAMES


def blocking_failures(name: str, report: StepReport) -> list[Check]:
    """The checks of one step's report that failed and stop the steps after it."""
    return [c for c in report.checks if not c.passed and blocks(name, c.severity)]


class ChecksFailed(RuntimeError):
    """An error-level check failed: the index's later steps (the publish among them) did not run."""

    def __init__(self, index: str, name: str, failed: list[Check], reports: dict[str, StepReport]) -> None:
        self.index, self.step, self.failed, self.reports = index, name, failed, reports
        stopped = "" if name == PUBLISH else "; the previous version stays published"
        super().__init__(f"{index}: {name} check(s) failed: {', '.join(c.name for c in failed)}{stopped}")


def run_step(
    declared: IndexStep, store: Store, spec: IndexSpec, embedder: Embedder | None, run: StepRun
) -> StepReport:
    """One step on one index: its function, given the embedder only where the step uses it (in a span
    `index.<step>` when OTEL_* asks for traces)."""
    configure_tracing()
    with span(f"index.{declared.name}", index=str(spec.name), step=declared.name):
        return declared.function(store, spec, embedder if declared.uses_embedder(spec.config) else None, run)


def run_index_steps(
    store: Store,
    spec: IndexSpec,
    embedder: Embedder | None,
    *,
    run: StepRun | None = None,
    before: Callable[[IndexStep, dict[str, StepReport]], None] | None = None,
) -> dict[str, StepReport]:
    """Every index step in the table's order, each report by step name; `before` is called ahead of
    each step. With checks (the default), raises `ChecksFailed` right after a step whose
    error-level check failed."""
    run = run or StepRun()
    reports: dict[str, StepReport] = {}
    for declared in INDEX_STEPS:
        if before is not None:
            before(declared, reports)
        reports[declared.name] = report = run_step(declared, store, spec, embedder, run)
        failed = blocking_failures(declared.name, report)
        if failed:
            raise ChecksFailed(str(spec.name), declared.name, failed, reports)
    return reports


def build_index(store: Store, spec: IndexSpec, embedder: Embedder | None, *, chunker=None) -> PublishReport:
    """Every index step without their checks, for scripts, tests and the benchmarks' own indexes
    (`chunker` in place of the config's); the publish's report."""
    reports = run_index_steps(store, spec, embedder, run=StepRun(checks=False, chunker=chunker))
    published = reports[PUBLISH].stage
    if not isinstance(published, PublishReport):
        raise TypeError(f"the {PUBLISH} step of {spec.name} returned no PublishReport")
    return published
