"""Evaluation data types: reference spans, questions and datasets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chunkyard.chunking.types import Document


class DatasetError(ValueError):
    """A dataset, eval set or reference is missing or malformed; the message names what and where."""


@dataclass(frozen=True, order=True)
class Span:
    """A character range `[start, end)` of one document: what a reference or a retrieved chunk covers."""

    doc_id: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if not isinstance(self.start, int) or not isinstance(self.end, int):
            raise DatasetError(f"span {self.doc_id!r}: start and end must be integers")
        if self.start < 0 or self.end < self.start:
            raise DatasetError(f"span {self.doc_id!r} [{self.start}, {self.end}): needs 0 <= start <= end")

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Question:
    """One evaluation question and the spans that answer it.

    `references` is the set of spans a perfect retriever returns (Chroma's semantics: all of
    them are needed, recall is the covered fraction of their characters). `alternatives`
    holds other complete reference sets that answer the question equally well (another
    occurrence of a repeated passage, another annotator's answer in SQuAD); character
    metrics score the question against whichever set it matches best.
    """

    id: str
    text: str
    references: list[Span]
    corpus: str | None = None
    alternatives: tuple[tuple[Span, ...], ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    def reference_sets(self) -> list[list[Span]]:
        """The primary reference set first, then every alternative set."""
        return [list(self.references), *(list(alt) for alt in self.alternatives)]

    def all_reference_spans(self) -> list[Span]:
        """Every span of every set (for hit@k: any of them counts)."""
        spans: list[Span] = []
        seen: set[Span] = set()
        for reference_set in self.reference_sets():
            for span in reference_set:
                if span not in seen:
                    seen.add(span)
                    spans.append(span)
        return spans


@dataclass
class Dataset:
    """Documents plus the questions asked of them. Document ids are what spans refer to."""

    name: str
    documents: list[Document]
    questions: list[Question]
    # Human-readable notes from loading (ambiguous or unlocated answers, skipped items).
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        ids = [d.id for d in self.documents]
        if len(set(ids)) != len(ids):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            raise DatasetError(f"dataset {self.name!r}: duplicate document ids {duplicates[:5]}")

    @property
    def documents_by_id(self) -> dict[str, Document]:
        return {d.id: d for d in self.documents}

    @property
    def corpora(self) -> list[str]:
        """Corpus labels of the questions, in first-seen order (`None` left out)."""
        seen: dict[str, None] = {}
        for q in self.questions:
            if q.corpus is not None:
                seen.setdefault(q.corpus, None)
        return list(seen)

    def subset(self, question_ids: Iterable[str]) -> Dataset:
        wanted = set(question_ids)
        return Dataset(
            self.name, self.documents, [q for q in self.questions if q.id in wanted], self.problems
        )


def validate_spans(questions: Sequence[Question], documents: Sequence[Document], *, source: str) -> None:
    """Every reference must name a known document and lie inside its text."""
    lengths = {d.id: len(d.text) for d in documents}
    for q in questions:
        for reference_set in q.reference_sets():
            for span in reference_set:
                if span.doc_id not in lengths:
                    raise DatasetError(
                        f"{source}: question {q.id!r} refers to unknown document {span.doc_id!r}"
                    )
                if span.end > lengths[span.doc_id]:
                    raise DatasetError(
                        f"{source}: question {q.id!r} span [{span.start}, {span.end}) runs past the end "
                        f"of document {span.doc_id!r} ({lengths[span.doc_id]} characters)"
                    )
