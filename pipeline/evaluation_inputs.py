"""What an evaluation and a leaderboard are computed from, as plain values to hash: `evaluation_inputs`,
`leaderboard_inputs` (the assets skip a step whose inputs are those of its last run)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chunkyard.retrieval.settings.config import Collection, IndexSpec
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.settings.project import project_root
from chunkyard.retrieval.store import Store


def questions_source(collection: Collection) -> str:
    """The collection's questions by content: the eval set file's sha256, or the bundled dataset's name
    (its files change only with the code, whose version the asset declares)."""
    if collection.dataset:
        return f"dataset:{collection.dataset}"
    if not collection.eval_set:
        return "none"
    path = Path(collection.eval_set)
    path = path if path.is_absolute() else project_root() / path
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:  # the step itself reports the missing file
        return f"unreadable:{exc.__class__.__name__}"


def evaluation_inputs(store: Store, collection: Collection, spec: IndexSpec) -> dict[str, Any]:
    """The published index version (and its coarse companion's) and the questions' content."""
    versions = {str(spec.name): store.indexes.version(str(spec.name))}
    if spec.config.coarse:
        coarse = str(spec.name.sibling(spec.config.coarse["config"]))
        versions[coarse] = store.indexes.version(coarse)
    return {"index_versions": versions, "questions": questions_source(collection)}


def leaderboard_inputs(store: Store, index_names: Sequence[IndexName]) -> dict[str, Any]:
    """Each index's latest stored evaluation (its time and the index version it evaluated)."""
    latest: dict[str, Any] = {}
    for name in index_names:
        record = store.evaluations.latest_record(str(name))
        latest[str(name)] = None if record is None else [record["created_at"], record["index_version"]]
    return {"evaluations": latest}
