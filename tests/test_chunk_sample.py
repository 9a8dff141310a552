"""The chunks asset's materialization shows a few documents' chunks (span, length, where, first words)
and points to `chunkyard chunks DOC` for the rest: read from the real Dagster instance."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.pipeline.chunk_sample import SAMPLE_DOCUMENTS, first_words, where
from dagster import AssetKey, AssetSelection, instance_for_test, materialize

from tests.dagster_helpers import DOCS, unique_name, write_project


def test_the_chunks_asset_shows_the_first_documents_chunks_and_points_to_chunkyard_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    from chunkyard.assets.definitions import build_definitions

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    collection = unique_name("s")
    docs = {
        **DOCS,
        "delta.md": "# Delta\n\nA | pipe and `ticks` stay in their cell.\n",
        "zeta.md": "# Zeta\n\nLast.\n",
    }
    _, indexes_path, collections_path = write_project(tmp_path, collection, docs=docs, configs=["token-48"])
    defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
    chunks_key = AssetKey([collection, "token_48", "chunks"])
    with instance_for_test() as instance:
        result = materialize(
            list(defs.assets),
            instance=instance,
            resources=defs.resources,
            selection=AssetSelection.assets(AssetKey([collection, "documents"]), chunks_key),
        )
        assert result.success
        event = instance.get_latest_materialization_event(chunks_key)
        assert event is not None and event.asset_materialization is not None
        sample = event.asset_materialization.metadata["chunks_sample"]
    text = sample.value
    assert type(sample).__name__ == "MarkdownMetadataValue"
    assert text.startswith(f"Chunks of {SAMPLE_DOCUMENTS} of the 5 documents re-chunked by this run:")
    shown = sorted(docs)[:SAMPLE_DOCUMENTS]  # alpha.md, beta.md, delta.md: the first by id
    assert [line.split("**")[1] for line in text.splitlines() if line.startswith("**")] == shown
    assert "gamma.txt" not in text and "zeta.md" not in text  # bounded: the rest through the CLI
    assert "| # | span | characters | where | first words |" in text
    assert "| 1 | 0:" in text and "# Alpha Postgres stores every chunk" in text
    assert "A \\| pipe and 'ticks' stay" in text  # one cell, whatever the text holds
    assert text.endswith(f"`chunkyard chunks DOC --index {collection}/token-48`")


def test_where_names_pages_slides_and_headings() -> None:
    assert where({"page": 2, "page_end": 3}) == "pages 2-3"
    assert where({"slide": 4, "heading_path": ["Setup", "Install"]}) == "slide 4, Setup › Install"
    assert where({}) == "-"
    assert (
        first_words("one two three four five six seven eight nine")
        == "one two three four five six seven eight …"
    )
