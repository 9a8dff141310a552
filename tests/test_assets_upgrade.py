"""An index published before the publish asset was renamed (`index` -> `publish`) serves on, unrebuilt.

The previous release recorded each publish under the asset key `[collection, config, index]`. After
the upgrade that key is no longer defined (its history stays in the event log) and the index's
`publish` asset has never been materialized, so the first run runs every step: it must find nothing
to re-chunk or re-embed, and search must answer as before, the whole time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.assets.keys import safe_name
from chunkyard.pipeline.graph import build_index
from chunkyard.pipeline.steps.documents import sync_documents
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import load_collections
from chunkyard.retrieval.settings.config_checks import load_index_specs
from chunkyard.retrieval.store import Store
from dagster import AssetKey, AssetMaterialization, instance_for_test

from tests.dagster_helpers import materializations, unique_name, write_project
from tests.test_assets import _materialize_all


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str) -> str:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    return pg_url


QUERIES = ("zyxomorphic", "how does the sensor notice changes", "reciprocal rank")


def _answers(store: Store, embedder, index: str) -> list[list[tuple[str, int, int]]]:
    searcher = Searcher(store, embedder)
    return [
        [(r.doc_id, r.start, r.end) for r in searcher.search(query, index=index, k=3, mode="hybrid")]
        for query in QUERIES
    ]


@pytest.mark.slow
def test_an_index_published_under_the_old_asset_key_serves_and_is_not_rebuilt(
    tmp_path: Path,
    env: str,
    embedder,
) -> None:
    from chunkyard.assets.definitions import build_definitions

    collection = unique_name("u")
    _, indexes_path, collections_path = write_project(tmp_path, collection, configs=["token-48"])
    spec = load_index_specs(indexes_path, collections_path)[0]
    store = Store(env)
    store.migrate()
    # the previous release: documents synced, the index built and published by the same stages ...
    sync_documents(store, load_collections(collections_path)[collection])
    build_index(store, spec, embedder)
    before = _answers(store, embedder, str(spec.name))
    version = store.indexes.version(spec.name)
    old_key = AssetKey([safe_name(collection), safe_name(spec.config.name), "index"])
    with instance_for_test() as instance:
        # ... and its publish recorded under the old key
        instance.report_runless_asset_event(AssetMaterialization(asset_key=old_key))
        defs = build_definitions(indexes_path, collections_path, database_url=env)
        assert old_key not in defs.resolve_asset_graph().get_all_asset_keys()
        result = _materialize_all(defs, instance)
        assert result.success
        meta = materializations(result)
        prefix = f"{collection}/token_48"
        assert meta[f"{prefix}/chunks"]["chunks_staged"] == 0  # nothing re-chunked ...
        assert meta[f"{prefix}/embeddings"]["embeddings_computed"] == 0  # ... or re-embedded
        assert f"{prefix}/publish" in meta
        assert instance.get_latest_materialization_event(old_key) is not None  # the old history stays
    assert store.indexes.version(spec.name) >= version
    assert _answers(store, embedder, str(spec.name)) == before
    store.close()
