"""The questions each variant missed, what it retrieved instead and the reference: why a config loses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.types import Question
from chunkyard.evaluation.metrics import MetricSummary
from chunkyard.retrieval.settings.names import IndexName

SNIPPET_CHARS = 160  # characters of each retrieved or reference text kept per miss
MISSES_KEPT = 100  # misses kept per variant in a report (the count is always exact)
MARKDOWN_ROWS = 20  # misses shown per variant in the markdown table


class DocumentReader(Protocol):
    """What the misses read reference texts from: a store's `documents` room."""

    def read(self, collection: str, doc_ids: Iterable[str] | None = None) -> list[Document]: ...


class Retrieved(Protocol):
    doc_id: str
    start: int
    end: int
    text: str


def find_misses(
    questions: Sequence[Question],
    retrievals: Sequence[Sequence[Retrieved]],
    summary: MetricSummary,
    k: int,
    *,
    kept: int = MISSES_KEPT,
) -> list[dict[str, Any]]:
    """Every question whose top `k` holds no reference span (hit@k = 0), in question order.

    Each miss: `id`, `question`, `reference` (doc_id, start, end; `text` empty until
    `collect_misses` reads it) and `retrieved` (the top k spans with their text). Only the first
    `kept` are returned.
    """
    hit = f"hit_at_{k}"
    misses = []
    for question, retrieved in zip(questions, retrievals, strict=True):
        scores = summary.per_question.get(question.id)
        if scores is None or scores.get(hit, 1.0) > 0.0:
            continue
        misses.append(
            {
                "id": question.id,
                "question": question.text,
                "reference": [
                    {
                        "doc_id": span.doc_id,
                        "start": span.start,
                        "end": span.end,
                        "text": "",
                    }
                    for span in question.references
                ],
                "retrieved": [
                    {"doc_id": r.doc_id, "start": r.start, "end": r.end, "text": r.text[:SNIPPET_CHARS]}
                    for r in retrieved[:k]
                ],
            }
        )
        if len(misses) >= kept:
            break
    return misses


def collect_misses(
    questions: Sequence[Question],
    retrievals: Mapping[str, Sequence[Sequence[Retrieved]]],
    summaries: Mapping[str, MetricSummary],
    k: int,
    documents: DocumentReader | None,
    index_name: str,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Per variant, the misses (`find_misses`, reference texts read from the index's collection) and their count."""
    misses = {variant: find_misses(questions, retrievals[variant], s, k) for variant, s in summaries.items()}
    missed = {
        variant: sum(1 for scores in s.per_question.values() if scores.get(f"hit_at_{k}", 1.0) == 0.0)
        for variant, s in summaries.items()
    }
    doc_ids = {span["doc_id"] for rows in misses.values() for miss in rows for span in miss["reference"]}
    if documents is not None and doc_ids:
        collection = IndexName.parse(index_name).collection
        texts = {doc.id: doc.text for doc in documents.read(collection, sorted(doc_ids))}
        for rows in misses.values():
            for miss in rows:
                for span in miss["reference"]:
                    if span["doc_id"] in texts:
                        span["text"] = texts[span["doc_id"]][span["start"] : span["end"]][:SNIPPET_CHARS]
    return misses, missed


def misses_markdown(
    misses: Mapping[str, Sequence[dict[str, Any]]],
    counts: Mapping[str, int],
    k: int,
    *,
    rows: int = MARKDOWN_ROWS,
) -> str:
    """One table per variant: each missed question, its reference and the top-k spans retrieved instead."""
    if not counts:
        return ""
    lines = [f"#### Questions missed (no reference span in the top {k})", ""]
    lines.append(", ".join(f"{variant}: {counts.get(variant, 0)}" for variant in counts) + ".")
    lines.append("")
    for variant, found in misses.items():
        if not found:
            continue
        shown = list(found)[:rows]
        lines += [
            f"**{variant}** ({counts.get(variant, len(found))} missed"
            + (f", first {len(shown)} shown" if counts.get(variant, len(found)) > len(shown) else "")
            + ")",
            "",
            "| question | reference | retrieved instead |",
            "|---|---|---|",
        ]
        for miss in shown:
            reference = "<br>".join(_span_cell(s) for s in miss["reference"])
            retrieved = "<br>".join(f"{i}. {_span_cell(s)}" for i, s in enumerate(miss["retrieved"], 1))
            lines.append(f"| {_cell(miss['id'])}: {_cell(miss['question'])} | {reference} | {retrieved} |")
        lines.append("")
    return "\n".join(lines)


def _span_cell(span: Mapping[str, Any]) -> str:
    where = f"`{span['doc_id']}` [{span['start']}, {span['end']})"
    text = _cell(span.get("text") or "")
    return f"{where} {text[:80]}…" if len(text) > 80 else f"{where} {text}".rstrip()


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")
