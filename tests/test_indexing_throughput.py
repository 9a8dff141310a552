"""The embedding stage's batching and the run's stage timings (issue 14), as pure functions."""

from __future__ import annotations

import pytest
from chunkyard.retrieval.indexing import embeddings
from chunkyard.retrieval.indexing.stage_reports import STAGES, stage_timings


def test_token_batches_sort_longest_first_and_respect_both_limits(monkeypatch):
    monkeypatch.setattr(embeddings, "EMBED_BATCH", 3)
    monkeypatch.setattr(embeddings, "EMBED_BATCH_TOKENS", 100)
    tokens = {"a": 10, "b": 90, "c": 40, "d": 40, "e": 5, "f": 1, "g": 2}
    batches = embeddings.token_batches(list(tokens), tokens)
    flat = [h for batch in batches for h in batch]
    assert sorted(flat) == sorted(tokens)  # every text once
    assert [tokens[h] for h in flat] == sorted(tokens.values(), reverse=True)
    for batch in batches:
        assert len(batch) <= 3
        assert sum(tokens[h] for h in batch) <= 100 or len(batch) == 1
    assert embeddings.token_batches([], {}) == []


def test_stage_timings_split_the_run_into_its_stages():
    staged = {
        "load_seconds": 1.0,
        "chunk_stage_seconds": 3.0,
        "embedding_stage_seconds": 10.0,
        "bm25_stage_seconds": 1.0,
    }
    timings = stage_timings(staged, publish_seconds=5.0, hnsw_seconds=2.0)
    assert timings["stage_chunk_seconds"] == 2.0 and timings["stage_publish_seconds"] == 3.0
    assert timings["stages_total_seconds"] == 19.0
    assert sum(timings[f"{s}_stage_share"] for s in STAGES) == pytest.approx(1.0, abs=1e-3)
    assert stage_timings({}, 0.0, 0.0)["embed_stage_share"] == 0.0
