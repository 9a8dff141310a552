"""Chroma's general chunking benchmark: five corpora, 472 questions, references as character spans."""

from __future__ import annotations

import csv
import itertools
import json
import os
from pathlib import Path

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.locate import occurrences_of_span_text
from chunkyard.evaluation.datasets.types import Dataset, DatasetError, Question, Span, validate_spans

CHROMA_GENERAL = "chroma_general"
CHROMA_CORPORA = ("state_of_the_union", "wikitexts", "chatlogs", "finance", "pubmed")
QUESTIONS_FILE = "questions_df.csv"
# Cap on alternative reference sets per question when repeated passages are expanded.
MAX_ALTERNATIVES = 16


def datasets_dir() -> Path:
    """The shared datasets folder: CHUNKYARD_DATA, else `<project>/../shared/datasets`."""
    env = os.environ.get("CHUNKYARD_DATA")
    if env:
        return Path(env).expanduser().resolve()
    from chunkyard.retrieval.settings.project import project_root

    candidates = [project_root().parent / "shared" / "datasets"]
    package_root = Path(__file__).resolve().parents[2]
    candidates.append(package_root.parent / "shared" / "datasets")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    return candidates[0]


def chroma_dir(path: str | Path | None = None) -> Path:
    folder = Path(path) if path else datasets_dir() / CHROMA_GENERAL
    if not (folder / QUESTIONS_FILE).is_file():
        raise DatasetError(
            f"Chroma benchmark data not found: {folder / QUESTIONS_FILE} does not exist. Put the "
            f"chroma_general folder (questions_df.csv and the five corpus .md files) under the "
            f"datasets folder, or set CHUNKYARD_DATA to the folder that contains chroma_general/"
        )
    return folder


def load_chroma_documents(folder: Path) -> list[Document]:
    documents = []
    for corpus in CHROMA_CORPORA:
        path = folder / f"{corpus}.md"
        if not path.is_file():
            raise DatasetError(f"Chroma benchmark: corpus file missing: {path}")
        # newline="" keeps the bytes' line endings: the stored offsets index the raw decoded text.
        with path.open(encoding="utf-8", newline="") as handle:
            text = handle.read()
        documents.append(
            Document(
                id=corpus, text=text, mime_type="text/markdown", title=corpus, metadata={"corpus": corpus}
            )
        )
    return documents


def load_chroma_general(path: str | Path | None = None, *, duplicates: str = "first") -> Dataset:
    """Load the benchmark. Document ids are the corpus names; question ids are `<corpus>-<row>`.

    `duplicates="first"` keeps each reference exactly as published (the first occurrence of
    its text). `duplicates="alternatives"` adds, for references whose text is repeated in the
    corpus (96 finance excerpts), the other occurrences as alternative reference sets.
    """
    if duplicates not in ("first", "alternatives"):
        raise DatasetError(f"duplicates: expected 'first' or 'alternatives', got {duplicates!r}")
    folder = chroma_dir(path)
    documents = load_chroma_documents(folder)
    by_id = {d.id: d for d in documents}
    questions: list[Question] = []
    problems: list[str] = []
    with (folder / QUESTIONS_FILE).open(encoding="utf-8", newline="") as handle:
        for row_number, row in enumerate(csv.DictReader(handle)):
            where = f"{folder / QUESTIONS_FILE} row {row_number + 2}"
            try:
                corpus = row["corpus_id"]
                raw_refs = json.loads(row["references"])
                text = row["question"]
            except (KeyError, json.JSONDecodeError) as exc:
                raise DatasetError(f"{where}: cannot read question/references/corpus_id: {exc}") from exc
            if corpus not in by_id:
                raise DatasetError(f"{where}: unknown corpus_id {corpus!r}; expected one of {CHROMA_CORPORA}")
            references = []
            for ref in raw_refs:
                span = Span(corpus, int(ref["start_index"]), int(ref["end_index"]))
                if by_id[corpus].text[span.start : span.end] != ref["content"]:
                    problems.append(f"{where}: reference content differs from the corpus text at its offsets")
                references.append(span)
            alternatives: tuple[tuple[Span, ...], ...] = ()
            if duplicates == "alternatives":
                alternatives = _duplicate_alternatives(references, by_id[corpus])
            questions.append(
                Question(
                    id=f"{corpus}-{row_number:03d}",
                    text=text,
                    references=references,
                    corpus=corpus,
                    alternatives=alternatives,
                )
            )
    validate_spans(questions, documents, source=str(folder / QUESTIONS_FILE))
    return Dataset(CHROMA_GENERAL, documents, questions, problems)


def _duplicate_alternatives(references: list[Span], document: Document) -> tuple[tuple[Span, ...], ...]:
    options = [occurrences_of_span_text(span, document) for span in references]
    if all(len(o) == 1 for o in options):
        return ()
    combos = itertools.islice(itertools.product(*options), MAX_ALTERNATIVES + 1)
    primary = tuple(references)
    return tuple(c for c in combos if c != primary)[:MAX_ALTERNATIVES]
