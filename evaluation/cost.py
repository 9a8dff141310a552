"""What an index costs (chunks, tokens embedded, overlap overhead, share over the model limit, bytes) and
what a result costs an LLM (`ContextTokens`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from chunkyard.chunking.models import model_token_limit
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.evaluation.metrics import merge_intervals
from chunkyard.retrieval.query.budget import llm_tokenizer as encoding_of
from chunkyard.retrieval.store import published_chunks
from chunkyard.retrieval.store.indexes import partition_names

if TYPE_CHECKING:
    from chunkyard.retrieval.query.results import SearchResult
    from chunkyard.retrieval.settings.config import IndexSpec
    from chunkyard.retrieval.store import Store


def index_cost(store: Store | None, index_name: str, spec: IndexSpec | str | None = None) -> dict[str, float]:
    """Chunks, tokens embedded, overlap overhead, share over the model limit and on-disk size.

    Read from the published partition: `tokens_embedded` counts what the model sees (its own
    tokenizer, capped at its input limit); `overlap_overhead` is the characters stored in
    chunks over the characters of the documents they cover, minus one.
    """
    if store is None:
        return {}
    part = partition_names(index_name)["chunks"]
    with store.connection() as conn:
        if not published_chunks.partition_exists(conn, part):
            return {}
        rows = published_chunks.spans_and_embed_texts(conn, part)
        size = published_chunks.partition_bytes(conn, part)
    if not rows:
        return {"chunks": 0.0}
    model = getattr(getattr(spec, "config", None), "embedding_model", None) or "all-MiniLM-L6-v2"
    tokenizer = get_tokenizer("model", model)
    counts = tokenizer.count_batch([r[3] for r in rows])
    limit = model_token_limit(model, default=512)
    by_doc: dict[str, list[tuple[int, int]]] = {}
    stored = 0
    for doc_id, start, end, _ in rows:
        by_doc.setdefault(doc_id, []).append((start, end))
        stored += end - start
    covered = sum(e - s for spans in by_doc.values() for s, e in merge_intervals(spans))
    return {
        "chunks": float(len(rows)),
        "tokens_embedded": float(sum(min(c, limit) for c in counts)),
        "tokens_total": float(sum(counts)),
        "mean_chunk_tokens": float(np.mean(counts)),
        "overlap_overhead": float(stored / covered - 1.0) if covered else 0.0,
        "share_over_model_limit": float(np.mean([c > limit for c in counts])),
        "index_bytes": float(size or 0),
    }


class ContextTokens:
    """LLM tokens of a result's text (its context cost), in the encoding `llm_tokenizer`, memoised per chunk id."""

    def __init__(self, llm_tokenizer: str) -> None:
        self.encoding = llm_tokenizer
        self._tokenizer = encoding_of(llm_tokenizer)
        self._cache: dict[str, int] = {}

    def __call__(self, result: SearchResult) -> int:
        key = getattr(result, "chunk_id", None) or f"{result.doc_id}:{result.start}:{result.end}"
        if key not in self._cache:
            self._cache[key] = self._tokenizer.count(result.text)
        return self._cache[key]
