"""Shared setup for the Dagster tests: a tiny project (docs folder + configs) on the test database."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

INDEXES = {
    "defaults": {
        "embedding_model": "all-MiniLM-L6-v2",
        "embedder": {"backend": "torch", "batch_size": 32},
        "bm25": {"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"},
        "hybrid": {"rrf_k": 60, "candidates": 50},
    },
    "indexes": {
        "token-48": {
            "description": "48-token windows (test)",
            "chunker": {"strategy": "token", "size": 48, "overlap": 0, "tokenizer": "model"},
        },
        "recursive-48": {
            "description": "recursive, 48 tokens (test)",
            "chunker": {"strategy": "recursive", "size": 48, "overlap": 0, "tokenizer": "model"},
        },
    },
}

DOCS = {
    "alpha.md": "# Alpha\n\nPostgres stores every chunk with its vector. The HNSW index answers nearest "
    "neighbour queries quickly.\n\nBM25 scores rare words such as zyxomorphic highly.\n",
    "beta.md": "# Beta\n\nThe sensor hashes file contents to notice changes. Timestamps are not trusted.\n\n"
    "Each run publishes atomically, so readers never see half an index.\n",
    "gamma.txt": "Gamma is plain text about evaluation. Hit rate at five and reciprocal rank measure "
    "whether the right span is retrieved near the top.",
}


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def write_project(
    root: Path,
    collection: str,
    *,
    docs: dict[str, str | bytes] | None = None,
    folders: list[str] | None = None,
    eval_set: list[dict[str, Any]] | None = None,
    indexes: dict[str, Any] | None = None,
    configs: list[str] | None = None,
) -> tuple[Path, Path, Path]:
    """Write docs/, indexes.yaml and collections.yaml under root; returns (docs, indexes, collections)."""
    docs_dir = root / "docs"
    docs_dir.mkdir(parents=True, exist_ok=True)
    for name, content in (DOCS if docs is None else docs).items():
        path = docs_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    indexes = indexes or INDEXES
    entry: dict[str, Any] = {
        "description": "test collection",
        "folders": folders or [str(docs_dir)],
        "include": ["**/*"],
        "indexes": configs or list(indexes["indexes"]),
    }
    if eval_set is not None:
        eval_path = root / "questions.jsonl"
        eval_path.write_text("\n".join(__import__("json").dumps(q) for q in eval_set) + "\n")
        entry["eval_set"] = str(eval_path)
    indexes_path = root / "indexes.yaml"
    collections_path = root / "collections.yaml"
    indexes_path.write_text(yaml.safe_dump(indexes))
    collections_path.write_text(yaml.safe_dump({"collections": {collection: entry}}))
    return docs_dir, indexes_path, collections_path


def materializations(result) -> dict[str, dict[str, Any]]:
    """{asset key 'a/b/c': {metadata name: plain value}} of a materialize() result."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        out[materialization.asset_key.to_user_string()] = {
            k: getattr(v, "value", v) for k, v in materialization.metadata.items()
        }
    return out


def check_results(result) -> dict[str, Any]:
    """{'asset/key:check_name': AssetCheckEvaluation}."""
    return {f"{e.asset_key.to_user_string()}:{e.check_name}": e for e in result.get_asset_check_evaluations()}


def ids(value: str) -> list[str]:
    """Parse an id-list metadata value ('a, b' or '-')."""
    return [] if value in ("", "-") else [v.strip() for v in value.split(",")]
