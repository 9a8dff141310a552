"""Finding answer text in documents: every occurrence, exact first, then whitespace/case-tolerant."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.types import Span


@dataclass(frozen=True)
class Located:
    """Where one answer text occurs. `exact` is False when only the tolerant match found it."""

    answer: str
    spans: tuple[Span, ...]
    exact: bool

    @property
    def missing(self) -> bool:
        return not self.spans

    @property
    def ambiguous(self) -> bool:
        return len(self.spans) > 1


def _tolerant_pattern(answer: str) -> re.Pattern[str] | None:
    words = answer.split()
    if not words:
        return None
    return re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE)


def locate_answer(answer: str, documents: Sequence[Document]) -> Located:
    """All non-overlapping occurrences of `answer` in `documents`, in document order.

    Exact matches win; only when there is none, a match that ignores case and treats any
    run of whitespace as equal is tried (answers copied from rendered text often differ
    from the source in line breaks).
    """
    if not answer or not answer.strip():
        return Located(answer, (), True)
    exact = re.compile(re.escape(answer))
    spans = [Span(d.id, m.start(), m.end()) for d in documents for m in exact.finditer(d.text)]
    if spans:
        return Located(answer, tuple(spans), True)
    tolerant = _tolerant_pattern(answer)
    if tolerant is None:
        return Located(answer, (), True)
    spans = [Span(d.id, m.start(), m.end()) for d in documents for m in tolerant.finditer(d.text)]
    return Located(answer, tuple(spans), False)


def occurrences_of_span_text(span: Span, document: Document) -> list[Span]:
    """Every occurrence of the span's text in its document (the span itself included)."""
    text = document.text[span.start : span.end]
    if not text:
        return [span]
    pattern = re.compile(re.escape(text))
    found = [Span(document.id, m.start(), m.end()) for m in pattern.finditer(document.text)]
    if span not in found:  # periodic text: non-overlapping matching can step over the span itself
        found = sorted([*found, span])
    return found
