"""What each indexing stage reports: plain counts, flattened into Dagster-friendly metadata."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class IndexingError(RuntimeError):
    """Staging or publishing cannot go on; the message says which step to (re)run."""


def flat_metadata(obj: Any) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for key, value in asdict(obj).items():
        if isinstance(value, bool):
            out[key] = int(value)
        elif isinstance(value, int | float | str):
            out[key] = value
        elif isinstance(value, dict):
            for sub_key, sub_value in value.items():
                if isinstance(sub_value, int | float | str) and not isinstance(sub_value, bool):
                    out.setdefault(sub_key, sub_value)
    return out


@dataclass
class ChunkStageReport:
    index: str
    documents_added: int = 0
    documents_changed: int = 0
    documents_deleted: int = 0
    documents_unchanged: int = 0
    chunks_staged: int = 0
    chunks_kept: int = 0
    chunks_to_delete: int = 0
    duplicate_chunks_dropped: int = 0
    chunks_precomputed_embeddings: int = 0
    full_rebuild: bool = False
    seconds: float = 0.0
    load_seconds: float = 0.0  # reading document texts from the store
    chunk_seconds: float = 0.0  # the chunker itself
    chunk_stage_seconds: float = 0.0  # `seconds` under a name that stays unique in the run's report

    def as_metadata(self) -> dict[str, int | float | str]:
        return flat_metadata(self)


@dataclass
class EmbeddingStageReport:
    index: str
    model_id: str = ""
    chunks: int = 0
    embeddings_computed: int = 0
    embeddings_reused: int = 0
    embeddings_precomputed: int = 0
    chunks_longer_than_model_limit: int = 0
    model_max_tokens: int = 0
    seconds: float = 0.0
    embeddings_per_second: float = 0.0
    tokens_embedded: int = 0
    embed_tokens_per_second: float = 0.0
    embed_seconds: float = 0.0  # inside the model only
    cache_lookup_seconds: float = 0.0
    cache_write_wait_seconds: float = 0.0  # waiting for cache writes that did not overlap the model
    stage_write_seconds: float = 0.0
    embedding_stage_seconds: float = 0.0
    # An embedding server's share (`EndpointUsage.as_metadata`): requests, retries, tokens, seconds.
    endpoint: dict[str, int | float] = field(default_factory=dict)

    def as_metadata(self) -> dict[str, int | float | str]:
        return flat_metadata(self)


@dataclass
class Bm25StageReport:
    index: str
    analyzer: str = ""  # the analyzer used (`auto` resolved)
    analyzer_setting: str = ""  # "auto" or the configured analyzer
    languages: str = ""  # `auto`'s text share per detected language, "es=0.97 en=0.03"
    chunks_analyzed: int = 0
    postings_staged: int = 0
    distinct_terms_staged: int = 0
    postings_keys_seconds: float = 0.0  # a swap's postings keyed in this stage (retrieval.indexing.swap)
    seconds: float = 0.0
    bm25_stage_seconds: float = 0.0

    def as_metadata(self) -> dict[str, int | float | str]:
        return flat_metadata(self)


@dataclass
class PublishReport:
    index: str
    version: int = 0
    published: bool = False
    chunks_inserted: int = 0
    chunks_deleted: int = 0
    chunks_total: int = 0
    documents_total: int = 0
    bm25_vocabulary: int = 0
    hnsw_built: bool = False
    full_rebuild: bool = False  # every chunk was replaced (a new config, or a first build)
    seconds: float = 0.0
    hnsw_seconds: float = 0.0
    tables_vacuumed: int = 0  # after the publish (see UPKEEP in `retrieval.indexing.publish`)
    vectors_checked: int = 0  # staged vectors found equal to their text's cached embedding
    vector_storage: str = "vector"  # the HNSW graph's type (`vector` or `halfvec`)
    postgres_version: str = ""  # the server the index was published on (`server_version`)
    pgvector_version: str = ""  # its `vector` extension (`pg_extension.extversion`)
    staged: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # see `stage_timings`

    def as_metadata(self) -> dict[str, int | float | str]:
        return flat_metadata(self)


# The run's stages in order (the keys of `stage_timings`).
STAGES = ("load", "chunk", "embed", "bm25", "publish", "hnsw")


def stage_timings(staged: dict[str, Any], publish_seconds: float, hnsw_seconds: float) -> dict[str, float]:
    """Seconds and share of the run's wall time per stage: load, chunk, embed, BM25, publish, HNSW build.

    `chunk` is the chunk stage less its document reads (`load`); `embed` the embedding stage (model,
    cache and staging writes); `publish` the publish transaction less the HNSW build.
    """

    def number(key: str) -> float:
        return float(staged.get(key) or 0.0)

    seconds = {
        "load": number("load_seconds"),
        "chunk": max(number("chunk_stage_seconds") - number("load_seconds"), 0.0),
        "embed": number("embedding_stage_seconds"),
        "bm25": number("bm25_stage_seconds"),
        "publish": max(publish_seconds - hnsw_seconds, 0.0),
        "hnsw": hnsw_seconds,
    }
    total = sum(seconds.values())
    out = {f"{name}_stage_share": round(seconds[name] / total, 4) if total else 0.0 for name in STAGES}
    out.update({f"stage_{name}_seconds": round(seconds[name], 3) for name in STAGES})
    out["stages_total_seconds"] = round(total, 3)
    return out
