"""Evaluation datasets: Chroma's general benchmark, SQuAD-format JSON, and users' own eval sets.

`load_dataset(name_or_path)` is the one entry point; documents carry the ids that the
reference spans (and the index's chunks) refer to.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.chroma import (
    CHROMA_CORPORA,
    CHROMA_GENERAL,
    datasets_dir,
    load_chroma_general,
)
from chunkyard.evaluation.datasets.evalset import (
    EvalSetLoad,
    load_eval_set,
    read_eval_set,
    read_records,
    resolve_records,
)
from chunkyard.evaluation.datasets.locate import Located, locate_answer
from chunkyard.evaluation.datasets.squad import load_squad
from chunkyard.evaluation.datasets.types import Dataset, DatasetError, Question, Span

__all__ = [
    "CHROMA_CORPORA",
    "CHROMA_GENERAL",
    "Dataset",
    "DatasetError",
    "EvalSetLoad",
    "Located",
    "Question",
    "Span",
    "datasets_dir",
    "load_chroma_general",
    "load_dataset",
    "load_documents_folder",
    "load_eval_set",
    "load_squad",
    "locate_answer",
    "read_eval_set",
]

_TEXT_SUFFIXES = (".md", ".txt", ".rst", ".html", ".htm", ".py", ".json", ".jsonl", ".csv", ".yaml", ".yml")


def load_dataset(
    name_or_path: str | Path,
    *,
    documents: Sequence[Document] | None = None,
    squad_documents: str = "paragraphs",
    duplicates: str = "first",
    on_missing: str = "skip",
) -> Dataset:
    """Load a dataset by name or path.

    - `chroma_general` (or a folder holding `questions_df.csv`): Chroma's benchmark, found under
      `CHUNKYARD_DATA` or `<project>/../shared/datasets`. `duplicates` see `load_chroma_general`.
    - `*.json`: SQuAD v1.1 format; `squad_documents` is `paragraphs` or `articles`.
    - `*.jsonl` / `*.yaml`: a user eval set over `documents`, or over the folder named by the
      YAML's `documents:` key (relative to the file; optional `include`/`exclude` globs).
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if text == CHROMA_GENERAL:
        return load_chroma_general(duplicates=duplicates)
    if path.is_dir() and (path / "questions_df.csv").is_file():
        return load_chroma_general(path, duplicates=duplicates)
    if not path.exists() and "/" not in text and (datasets_dir() / text).exists():
        return load_dataset(
            datasets_dir() / text,
            documents=documents,
            squad_documents=squad_documents,
            duplicates=duplicates,
            on_missing=on_missing,
        )
    suffix = path.suffix.lower()
    if suffix == ".json":
        return load_squad(path, documents=squad_documents)
    if suffix in (".jsonl", ".yaml", ".yml"):
        records, header = read_records(path)
        if documents is None:
            folder = header.get("documents")
            if not folder:
                raise DatasetError(
                    f"{path}: an eval set needs its documents: `chunkyard eval --collection NAME` reads the "
                    "collection's folders (with its eval_set), or give the YAML file a `documents:` folder"
                )
            folder_path = Path(folder)
            if not folder_path.is_absolute():
                folder_path = path.parent / folder_path
            documents = load_documents_folder(folder_path, header.get("include"), header.get("exclude"))
        loaded = resolve_records(records, documents, on_missing=on_missing, source=str(path))
        problems = list(loaded.problems)
        problems += [f"{path}: skipped (answer not found): {qid}" for qid in loaded.missing]
        return Dataset(str(header.get("name") or path.stem), list(documents), loaded.questions, problems)
    if not path.exists():
        raise DatasetError(
            f"dataset {text!r} not found: not a known name ({CHROMA_GENERAL}), not a file, and not "
            f"under the datasets folder {datasets_dir()} (set CHUNKYARD_DATA)"
        )
    raise DatasetError(
        f"dataset {text!r}: unknown format; expected a chroma folder, .json (SQuAD), .jsonl or .yaml"
    )


def load_documents_folder(
    folder: str | Path, include: Sequence[str] | None = None, exclude: Sequence[str] | None = None
) -> list[Document]:
    """Documents of a folder, through the platform's loader when present so ids match the index."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"documents folder not found: {folder}")
    try:
        from chunkyard.chunking.documents.folder import load_folder
    except ImportError:
        load_folder = None
    if load_folder is not None:
        docs, _failures = load_folder(folder, list(include or ["**/*"]), list(exclude or []))
        return list(docs)
    docs = []
    for file in sorted(folder.rglob("*")):
        relative = file.relative_to(folder).as_posix()
        if not file.is_file() or file.suffix.lower() not in _TEXT_SUFFIXES:
            continue
        if include and not any(file.relative_to(folder).match(p) or Path(relative).match(p) for p in include):
            continue
        if exclude and any(Path(relative).match(p) for p in exclude):
            continue
        try:
            docs.append(Document(id=relative, text=file.read_text(encoding="utf-8"), title=file.stem))
        except UnicodeDecodeError:
            continue
    return docs
