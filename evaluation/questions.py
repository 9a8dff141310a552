"""A collection's evaluation questions: from its dataset, or its eval set resolved against its documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from chunkyard.evaluation.datasets import load_dataset, read_records, resolve_records
from chunkyard.evaluation.datasets.types import Question
from chunkyard.retrieval.settings.config import Collection
from chunkyard.retrieval.settings.project import project_root
from chunkyard.retrieval.store import Store

_DOC_KEYS = ("doc", "doc_id", "document")


@dataclass
class CollectionQuestions:
    """The questions to evaluate on, the dataset's name, and the ids of questions skipped because
    they refer to a document the collection no longer has (deleted or failed to load)."""

    questions: list[Question] = field(default_factory=list)
    dataset: str = ""
    skipped: list[str] = field(default_factory=list)
    # the loader's notes: answers found more than once, references located elsewhere, ...
    notes: list[str] = field(default_factory=list)


def collection_questions(store: Store, collection: Collection) -> CollectionQuestions:
    """The collection's questions (none when it has neither a dataset nor an eval set)."""
    if collection.dataset:
        dataset = load_dataset(collection.dataset)
        return CollectionQuestions(list(dataset.questions), dataset.name, notes=list(dataset.problems))
    if not collection.eval_set:
        return CollectionQuestions()
    path = Path(collection.eval_set)
    if not path.is_absolute():
        path = project_root() / path
    documents = store.documents.read(collection.name)
    known = {d.id for d in documents}
    records, _header = read_records(path)
    kept, skipped = [], []
    for number, record in enumerate(records):
        entries = [record, *[r for r in record.get("references") or [] if isinstance(r, dict)]]
        named = {str(e[k]) for e in entries for k in _DOC_KEYS if e.get(k) is not None}
        if named - known:
            skipped.append(str(record.get("id", f"record {number + 1}")))
        else:
            kept.append(record)
    loaded = resolve_records(kept, documents, on_missing="skip", source=str(path))
    return CollectionQuestions(
        list(loaded.questions), path.stem, skipped + list(loaded.missing), list(loaded.problems)
    )
