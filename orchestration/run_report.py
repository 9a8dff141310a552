"""What a `chunkyard index` run tells the user beyond its steps: each failed check with its numbers,
whether Ctrl-C interrupted it, and what was chunked and embedded.

A failed error-level check fails the command (exit 1) even though Dagster's run succeeded (the checks
do not block the steps after them); a failed `warn` check is listed and the command succeeds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# What to do about a failed check, when the check's own numbers do not say it.
HINTS = {
    "within_model_token_limit": (
        "chunks longer than the embedding model's input are truncated by it: make the config's chunks "
        "smaller (`size` in the model's own tokens: `tokenizer: model`), or set `allow_truncation: true`"
    ),
    "no_empty_chunks": "empty chunks embed to noise: check the documents named in the check's examples",
}
DEFAULT_HINT = "`chunkyard ui` (http://127.0.0.1:3000) shows each check's examples under its asset"


@dataclass(frozen=True)
class FailedCheck:
    """One failed asset check: the asset (`collection/config/step`), the check, its severity and numbers."""

    asset: str
    name: str
    error: bool
    metadata: dict[str, Any]

    def line(self) -> str:
        numbers = ", ".join(
            f"{key}={_number(value)}"
            for key, value in self.metadata.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        )
        examples = str(self.metadata.get("examples", ""))
        examples = f"; e.g. {examples[:160]}{'...' if len(examples) > 160 else ''}" if examples else ""
        severity = "" if self.error else " (warning)"
        return f"{self.asset}: check {self.name} failed{severity}: {numbers}{examples}"


def _number(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def failed_checks(events: Iterable[Any]) -> list[FailedCheck]:
    """The failed checks among a run's events (`ExecuteInProcessResult.all_events`)."""
    from dagster import AssetCheckSeverity, DagsterEventType

    failed = []
    for event in events:
        if event.event_type != DagsterEventType.ASSET_CHECK_EVALUATION:
            continue
        evaluation = event.asset_check_evaluation_data
        if evaluation.passed:
            continue
        failed.append(
            FailedCheck(
                asset="/".join(evaluation.asset_key.path),
                name=evaluation.check_name,
                error=evaluation.severity == AssetCheckSeverity.ERROR,
                metadata={key: getattr(value, "value", value) for key, value in evaluation.metadata.items()},
            )
        )
    return failed


def hint(failed: list[FailedCheck]) -> str:
    """What to do about the first failed error-level check."""
    first = next((check for check in failed if check.error), None)
    return HINTS.get(first.name, DEFAULT_HINT) if first else DEFAULT_HINT


INTERRUPTIONS = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")


def interrupted(events: Iterable[Any]) -> bool:
    """Whether a step of the run failed because Ctrl-C interrupted it (Dagster turns it into a failure)."""
    for event in events:
        error = event.event_specific_data.error if event.is_step_failure else None  # type: ignore[union-attr]
        while error is not None:
            if error.cls_name in INTERRUPTIONS:
                return True
            error = error.cause
    return False


def evaluation_notes(events: Iterable[Any]) -> list[str]:
    """The evaluation steps' notes: questions skipped after an edit, answers found more than once, ..."""
    notes: list[str] = []
    for event in events:
        if not event.is_step_materialization:
            continue
        materialization = event.step_materialization_data.materialization
        if materialization.asset_key.path[-1] != "evaluation":
            continue
        text = getattr(materialization.metadata.get("notes"), "value", "") or ""
        notes += [line.removeprefix("- ") for line in str(text).splitlines() if line.strip()]
    return notes


def failure_hint(failures: list[str]) -> str:
    """The hint under a failed run: the UI's step logs only when no step's error names the cause."""
    if failures:
        return "fix the cause above and rerun `chunkyard index` (finished steps are not redone)"
    return "open `chunkyard ui` (http://127.0.0.1:3000) for the step logs; fix and rerun `chunkyard index`"


def documents_text(n: int) -> str:
    """`no document`, `1 document`, `11 documents`: a count in plain words."""
    return "no document" if n == 0 else "1 document" if n == 1 else f"{n} documents"


def count_lines(summary: dict) -> list[str]:
    """What the run chunked and embedded, in words that match: an edited document is re-chunked
    whole, but only its chunks with new text are embedded (the rest come from the embedding cache)."""
    computed, reused = summary["computed"], summary["reused"]
    per_config: list[int] = summary["rechunked"]  # one count per config: each index has its own last publish
    if len(set(per_config)) <= 1:
        documents = (
            f"{documents_text(per_config[0] if per_config else 0)} added or changed since the last publish"
        )
    else:  # `11 and 0 documents`, one count per config in order
        counts = [str(n) for n in per_config]
        documents = (
            f"{', '.join(counts[:-1])} and {counts[-1]} documents added or changed since each config's "
            "last publish"
        )
    configs = f"{len(per_config)} configs" if len(per_config) > 1 else "1 config"
    return [
        f"Chunks ({configs}): {summary['staged']} re-chunked from {documents}"
        f"{', in each' if len(per_config) > 1 and len(set(per_config)) == 1 else ''}, {summary['kept']} kept "
        "unchanged (neither re-chunked nor re-embedded)",
        f"Embeddings: {computed} computed for new text, {reused} reused from the embedding cache "
        "(text embedded before)" + (", nothing re-embedded" if computed == 0 else ""),
    ]
