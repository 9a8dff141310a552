"""The staging area's rows as the indexing stages get them from `store.staging` (which holds their SQL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StagedRun:
    """The `staged_runs` row of an index: what stage_chunks staged, by which run (`owner`).

    `report` (every stage's report merged) is read by `read_staged_run` only; `lock_staged_run` reads
    the owner alone and leaves it empty.
    """

    config_hash: str
    full_rebuild: bool
    model_id: str | None
    owner: str | None
    report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EmbeddingInputs:
    """What stage_embeddings reads as it starts: the run row (None: nothing staged) and, when the run
    is the caller's, the vectors staged while chunking and the chunks still without one."""

    run: StagedRun | None
    precomputed: int = 0
    pending: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class VectorCheck:
    """Staged vectors compared with the embedding cache's vector of their chunk's text."""

    checked: int
    wrong: int
    example: str | None  # the smallest chunk id of a wrong one


@dataclass(frozen=True)
class Bm25Inputs:
    """What stage_bm25 reads as it starts: the run row (None: nothing staged) and, when the run is the
    caller's, its staged chunks as (chunk_id, embed_text, language, is code, characters of text), the
    characters of prose per language ('' when undetected; code chunks left out), and the index's
    published version (None: no such index) and `bm25` settings (None before its first publish)."""

    run: StagedRun | None
    chunks: list[tuple[str, str, str | None, bool, int]] = field(default_factory=list)
    text_by_language: dict[str, int] = field(default_factory=dict)
    version: int | None = None
    published_bm25: dict[str, Any] | None = None


@dataclass(frozen=True)
class PostingsStaged:
    """What `stage_postings` wrote: postings, distinct terms, and the seconds the next postings table's
    keys and statistics took (None: no swap)."""

    postings: int
    distinct_terms: int
    keys_seconds: float | None
