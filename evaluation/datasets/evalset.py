"""A user's own eval set: JSONL or YAML questions with spans or answer text located in the documents.

One record per question::

    {"id": "q1", "question": "How are chunk ids made?",
     "references": [{"doc": "architecture.md", "start": 120, "end": 180}]}
    {"question": "Which database?", "answers": ["Postgres", "PostgreSQL"]}
    {"question": "...", "references": [{"doc": "a.md", "text": "exact excerpt"}], "corpus": "docs"}

`references` are all needed (recall counts how much of them is retrieved); each may give
`start`/`end` or a `text` to locate. `answers` are alternatives: any one answers the
question. Text is located at every occurrence (restricted to `doc` when given); answers
found more than once or not at all are reported in `EvalSetLoad.problems`.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.locate import locate_answer
from chunkyard.evaluation.datasets.types import DatasetError, Question, Span, validate_spans

log = logging.getLogger(__name__)

MAX_ALTERNATIVES = 16
_QUESTION_KEYS = ("question", "text", "query")
_DOC_KEYS = ("doc", "doc_id", "document")


@dataclass
class EvalSetLoad:
    """Questions read from an eval set, and what could not be resolved cleanly."""

    questions: list[Question]
    problems: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)  # question ids with an answer found > 1 time
    missing: list[str] = field(default_factory=list)  # question ids skipped: nothing located


def read_records(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Question records plus the YAML header (empty for JSONL)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"eval set not found: {path}")
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8: {exc}") from exc
    if suffix == ".jsonl":
        records = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("//"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{line_number}: invalid JSON: {exc.msg}") from exc
            if not isinstance(record, dict):
                raise DatasetError(f"{path}:{line_number}: each line must be a JSON object")
            record.setdefault("_where", f"{path}:{line_number}")
            records.append(record)
        return records, {}
    if suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise DatasetError(f"{path}: invalid YAML: {exc}") from exc
        header: dict[str, Any] = {}
        if isinstance(data, dict):
            header = {k: v for k, v in data.items() if k != "questions"}
            data = data.get("questions")
        if not isinstance(data, list):
            raise DatasetError(f"{path}: expected a list of questions or a mapping with `questions:`")
        records = []
        for number, record in enumerate(data):
            if not isinstance(record, dict):
                raise DatasetError(f"{path}: questions[{number}] must be a mapping")
            records.append({**record, "_where": f"{path}: questions[{number}]"})
        return records, header
    raise DatasetError(f"{path}: unknown eval set format {suffix!r}; expected .jsonl, .yaml or .yml")


def load_eval_set(
    path: str | Path, documents: Sequence[Document], *, on_missing: str = "skip"
) -> list[Question]:
    """Questions of an eval set over `documents`; problems are logged (see `read_eval_set`)."""
    loaded = read_eval_set(path, documents, on_missing=on_missing)
    for problem in loaded.problems:
        log.warning("%s", problem)
    return loaded.questions


def read_eval_set(
    path: str | Path, documents: Sequence[Document], *, on_missing: str = "skip"
) -> EvalSetLoad:
    """Resolve every record to spans. `on_missing="error"` raises instead of skipping a question
    whose answer text is found nowhere."""
    if on_missing not in ("skip", "error"):
        raise DatasetError(f"on_missing: expected 'skip' or 'error', got {on_missing!r}")
    records, _ = read_records(path)
    return resolve_records(records, documents, on_missing=on_missing, source=str(path))


def resolve_records(
    records: Sequence[dict[str, Any]], documents: Sequence[Document], *, on_missing: str, source: str
) -> EvalSetLoad:
    resolver = _DocumentResolver(documents)
    result = EvalSetLoad([])
    seen_ids: set[str] = set()
    for number, record in enumerate(records):
        where = record.get("_where", f"{source}: record {number}")
        text = next((record[k] for k in _QUESTION_KEYS if isinstance(record.get(k), str)), None)
        if not text or not text.strip():
            raise DatasetError(f"{where}: needs a non-empty `question`")
        qid = str(record.get("id", f"q{number + 1:04d}"))
        if qid in seen_ids:
            raise DatasetError(f"{where}: duplicate question id {qid!r}")
        seen_ids.add(qid)
        reference_sets, notes, ambiguous = _reference_sets(record, resolver, where)
        result.problems.extend(f"{where} ({qid}): {note}" for note in notes)
        if ambiguous:
            result.ambiguous.append(qid)
        if not reference_sets:
            if on_missing == "error":
                raise DatasetError(f"{where} ({qid}): no reference could be located; " + "; ".join(notes))
            result.missing.append(qid)
            continue
        corpus = record.get("corpus")
        result.questions.append(
            Question(
                id=qid,
                text=text,
                references=list(reference_sets[0]),
                corpus=str(corpus) if corpus is not None else None,
                alternatives=tuple(tuple(s) for s in reference_sets[1 : MAX_ALTERNATIVES + 1]),
                metadata={
                    k: v
                    for k, v in record.items()
                    if k
                    not in (
                        *_QUESTION_KEYS,
                        "id",
                        "corpus",
                        "references",
                        "answers",
                        "answer",
                        "_where",
                        *_DOC_KEYS,
                    )
                },
            )
        )
    validate_spans(result.questions, documents, source=source)
    return result


def _doc_name(entry: dict[str, Any]) -> str | None:
    value = next((entry[k] for k in _DOC_KEYS if entry.get(k) is not None), None)
    return str(value) if value is not None else None


def _reference_sets(
    record: dict[str, Any], resolver: _DocumentResolver, where: str
) -> tuple[list[list[Span]], list[str], bool]:
    notes: list[str] = []
    ambiguous = False
    refs = record.get("references")
    answers = record.get("answers", record.get("answer"))
    if refs is None and answers is None:
        raise DatasetError(f"{where}: needs `references` (spans or text) or `answers`")
    if refs is not None:
        if not isinstance(refs, list) or not refs:
            raise DatasetError(f"{where}: `references` must be a non-empty list")
        options: list[list[Span]] = []
        for number, ref in enumerate(refs):
            rwhere = f"{where}: references[{number}]"
            if not isinstance(ref, dict):
                raise DatasetError(f"{rwhere}: must be a mapping with doc + start/end or text")
            docs = resolver.restrict(_doc_name(ref), rwhere)
            if "start" in ref or "end" in ref:
                if len(docs) != 1 or _doc_name(ref) is None:
                    raise DatasetError(f"{rwhere}: a span needs `doc`")
                try:
                    span = Span(docs[0].id, int(ref["start"]), int(ref["end"]))
                except (KeyError, TypeError, ValueError) as exc:
                    raise DatasetError(f"{rwhere}: needs integer `start` and `end`") from exc
                expected = ref.get("text")
                actual = docs[0].text[span.start : span.end]
                if isinstance(expected, str) and expected != actual:
                    located = locate_answer(expected, docs)
                    if located.missing:
                        raise DatasetError(
                            f"{rwhere}: text {expected[:50]!r} is not at [{span.start}, {span.end}) of "
                            f"{docs[0].id!r} (found {actual[:50]!r}) nor anywhere else in it"
                        )
                    nearest = min(located.spans, key=lambda s: abs(s.start - span.start))
                    notes.append(
                        f"reference [{span.start}, {span.end}) of {docs[0].id!r} did not hold its text; "
                        f"moved to [{nearest.start}, {nearest.end})"
                    )
                    span = nearest
                options.append([span])
                continue
            if not isinstance(ref.get("text"), str):
                raise DatasetError(f"{rwhere}: needs `start`/`end` or `text`")
            located = locate_answer(ref["text"], docs)
            if located.missing:
                notes.append(f"reference text {ref['text'][:50]!r} not found; question skipped")
                return [], notes, ambiguous
            if located.ambiguous:
                ambiguous = True
                notes.append(f"reference text {ref['text'][:50]!r} found {len(located.spans)} times")
            if not located.exact:
                notes.append(f"reference text {ref['text'][:50]!r} matched ignoring case/whitespace")
            options.append(list(located.spans))
        combos = itertools.islice(itertools.product(*options), MAX_ALTERNATIVES + 1)
        return [list(c) for c in combos], notes, ambiguous
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise DatasetError(f"{where}: `answers` must be a string or a list of strings")
    docs = resolver.restrict(_doc_name(record), where)
    sets: list[list[Span]] = []
    for answer in answers:
        located = locate_answer(answer, docs)
        if located.missing:
            notes.append(f"answer {answer[:50]!r} not found")
            continue
        if located.ambiguous:
            ambiguous = True
            notes.append(f"answer {answer[:50]!r} found {len(located.spans)} times; each occurrence counts")
        if not located.exact:
            notes.append(f"answer {answer[:50]!r} matched ignoring case/whitespace")
        sets.extend([s] for s in located.spans if [s] not in sets)
    if not sets:
        notes.append("no answer located; question skipped")
    return sets, notes, ambiguous


class _DocumentResolver:
    """Maps a document name in an eval set to documents: exact id, else a unique path suffix."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self.documents = list(documents)
        self.by_id = {d.id: d for d in self.documents}

    def restrict(self, name: str | None, where: str) -> list[Document]:
        if name is None:
            return self.documents
        if name in self.by_id:
            return [self.by_id[name]]
        suffix = name.lstrip("./")
        matches = [d for d in self.documents if d.id.endswith("/" + suffix) or d.id == suffix]
        if len(matches) == 1:
            return matches
        if not matches:
            known = ", ".join(sorted(self.by_id)[:8])
            raise DatasetError(
                f"{where}: unknown document {name!r} (known: {known}{', ...' if len(self.by_id) > 8 else ''})"
            )
        raise DatasetError(f"{where}: document {name!r} is ambiguous: {sorted(d.id for d in matches)}")
