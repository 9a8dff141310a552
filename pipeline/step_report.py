"""What a pipeline step hands back: numbers to plot, id lists, texts, files, checks and warnings."""

from __future__ import annotations

from dataclasses import dataclass, field

from chunkyard.pipeline.checks import Check

Scalar = int | float | str


@dataclass
class StepReport:
    """One step's outcome, in plain values: the Dagster assets turn it into metadata and check
    results, `chunkyard eval` into its tables. Numbers stay numbers (the UI plots them)."""

    metadata: dict[str, Scalar] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)
    markdown: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
