"""`chunkyard index` over several collections reports every collection's documents, not the last one's."""

from __future__ import annotations

from pathlib import Path

import yaml
from dagster import AssetSelection, instance_for_test, materialize

from tests.dagster_helpers import unique_name, write_project


def test_the_run_summary_keeps_every_collections_documents_line(
    tmp_path: Path, pg_url: str, monkeypatch
) -> None:
    from chunkyard.assets.definitions import build_definitions
    from chunkyard.orchestration.cli_index import run_summary

    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    first, second = unique_name("a"), unique_name("b")
    docs_a, indexes_path, collections_path = write_project(tmp_path / "a", first, configs=["token-48"])
    docs_b, _, _ = write_project(tmp_path / "b", second, docs={"one.md": "# One\n\nA single note.\n"})
    collections = yaml.safe_load(collections_path.read_text())
    collections["collections"][second] = {**collections["collections"][first], "folders": [str(docs_b)]}
    collections_path.write_text(yaml.safe_dump(collections))
    defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
    keys = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[-1] == "documents"]
    with instance_for_test() as instance:
        result = materialize(
            list(defs.assets),
            instance=instance,
            resources=defs.resources,
            selection=AssetSelection.assets(*keys),
        )
    summary = run_summary(result)
    assert summary["documents"] == {
        first: "3 added, 0 changed, 0 deleted, 0 unchanged, 0 failed",
        second: "1 added, 0 changed, 0 deleted, 0 unchanged, 0 failed",
    }
