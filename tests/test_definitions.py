"""Definitions: load without torch, config-driven code versions, the generated Dagster instance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.dagster_helpers import INDEXES, unique_name, write_project


def test_code_location_loads_without_torch() -> None:
    code = (
        "import sys\n"
        "import dagster\n"
        "import chunkyard.assets.definitions as d\n"
        "assert not isinstance(d.defs, dagster.Definitions)  # built when Dagster loads it, not on import\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert d.defs().resolve_asset_graph().get_all_asset_keys()\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def test_project_graph_names_groups_and_descriptions(monkeypatch: pytest.MonkeyPatch) -> None:
    from chunkyard.assets.definitions import build_definitions

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    for kind in ("chunks", "embeddings", "bm25", "publish", "evaluation"):
        assert f"demo/recursive_256/{kind}" in keys
        assert f"demo/token_256/{kind}" in keys
    assert {"demo/documents", "demo/leaderboard"} <= keys
    node = graph.get(
        next(k for k in graph.get_all_asset_keys() if k.to_user_string() == "demo/token_256/chunks")
    )
    assert node.group_name == "demo__token_256"
    assert "256-token windows" in node.description
    emb = graph.get(
        next(k for k in graph.get_all_asset_keys() if k.to_user_string() == "demo/token_256/embeddings")
    )
    assert emb.pools == {"embedding"}
    assert defs.resolve_sensor_def("document_update_sensor") is not None
    assert defs.resolve_sensor_def("dead_run_janitor") is not None
    assert defs.executor.name == "chunkyard"  # multiprocess, in_process or celery (assets.executors)
    assert defs.executor.config_schema.default_value == {"multiprocess": {}}  # multiprocess by default
    schedule = defs.resolve_schedule_def("nightly_evaluation")
    assert schedule.default_status.value == "STOPPED"
    # The benchmark collection is off unless enabled: the project shows only its own collections.
    assert not any(k.path[0] == "chroma_general" for k in graph.get_all_asset_keys())
    monkeypatch.setenv("CHUNKYARD_BENCHMARKS", "1")
    graph = build_definitions().resolve_asset_graph()

    # A config with `coarse` brings its coarse index along, and its evaluation waits for both.
    adaptive = graph.get(
        next(
            k
            for k in graph.get_all_asset_keys()
            if k.to_user_string() == "chroma_general/eval_recursive_150_adaptive/evaluation"
        )
    )
    parents = {k.to_user_string() for k in adaptive.parent_keys}
    assert {
        "chroma_general/eval_recursive_150_adaptive/publish",
        "chroma_general/eval_recursive_400_ctx/publish",
    } <= parents
    # ... and that coarse index (not listed in collections.yaml) is a defined asset in its own group,
    # with a code version, like every index a config needs.
    for kind in ("chunks", "embeddings", "bm25", "publish"):
        key = next(
            k
            for k in graph.get_all_asset_keys()
            if k.to_user_string() == f"chroma_general/eval_recursive_400_ctx/{kind}"
        )
        node = graph.get(key)
        assert not node.is_external and node.is_materializable
        assert node.group_name == "chroma_general__eval_recursive_400_ctx"
        assert node.code_version
    # Every asset the graph knows is defined here (no undefined upstream in group `default`).
    assert all(graph.get(k).is_materializable for k in graph.get_all_asset_keys())


def _versions(indexes_path: Path, collections_path: Path) -> dict[str, str]:
    from chunkyard.assets.definitions import build_all

    built = build_all(indexes_path, collections_path)
    return {
        key.to_user_string(): assets_def.code_versions_by_key[key]
        for collection in built.values()
        for assets_def in collection.assets
        for key in assets_def.keys
    }


def test_editing_one_config_changes_only_its_code_versions(tmp_path: Path) -> None:
    collection = unique_name("v")
    _, indexes_path, collections_path = write_project(tmp_path, collection, eval_set=[])
    before = _versions(indexes_path, collections_path)

    edited = yaml.safe_load(indexes_path.read_text())
    edited["indexes"]["token-48"]["chunker"]["size"] = 40
    indexes_path.write_text(yaml.safe_dump(edited))
    after = _versions(indexes_path, collections_path)

    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == sorted(
        f"{collection}/token_48/{kind}" for kind in ("chunks", "embeddings", "bm25", "publish", "evaluation")
    )
    # A description edit does not change what is built: nothing goes stale.
    edited["indexes"]["recursive-48"]["description"] = "reworded"
    indexes_path.write_text(yaml.safe_dump(edited))
    assert _versions(indexes_path, collections_path) == after
    # The BM25 parameters of one config only touch that config's BM25 and what follows it.
    edited["indexes"]["recursive-48"]["bm25"] = {**INDEXES["defaults"]["bm25"], "k1": 1.2}
    indexes_path.write_text(yaml.safe_dump(edited))
    bm25_changed = sorted(k for k, v in _versions(indexes_path, collections_path).items() if after[k] != v)
    assert bm25_changed == sorted(
        f"{collection}/recursive_48/{kind}" for kind in ("bm25", "publish", "evaluation")
    )


def test_generated_instance_uses_postgres_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    from chunkyard.orchestration.instance import ensure_instance
    from dagster import DagsterInstance, asset, materialize

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("DATABASE_URL", pg_url)
    home = ensure_instance(pg_url)
    instance = yaml.safe_load((home / "dagster.yaml").read_text())
    assert "search_path" in instance["storage"]["postgres"]["postgres_url"]
    assert instance["concurrency"]["pools"]["default_limit"] == 1

    @asset
    def probe() -> int:
        return 1

    with DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        result = materialize([probe], instance=instance)
        assert result.success
        assert instance.get_run_by_id(result.run_id) is not None
    # The workspace file loads assets.definitions as the code location `chunkyard`.
    validated = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", str(home / "workspace.yaml")],
        cwd=REPO_ROOT,  # the repository's own project
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert validated.returncode == 0, validated.stderr[-3000:]
    assert "Validation successful for code location chunkyard" in validated.stderr + validated.stdout
    # Regenerating leaves a file the user took over (marker removed) alone.
    custom = "storage: {}\n"
    (home / "dagster.yaml").write_text(custom)
    ensure_instance(pg_url)
    assert (home / "dagster.yaml").read_text() == custom


def test_docker_compose_parses_and_wires_the_services() -> None:
    """No Docker engine here: check the compose file's structure and that its commands exist."""
    from chunkyard.orchestration.cli import build_parser
    from chunkyard.orchestration.stack import POSTGRES_IMAGE

    compose = yaml.safe_load((REPO_ROOT / "docker" / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {
        "postgres",
        "instance",
        "code-server",
        "dagster-webserver",
        "dagster-daemon",
        "query",
        "ui-proxy",
        "prometheus",  # scrapes the query service's /metrics (tests/test_compose_observability.py)
        "grafana",
    }
    assert services["postgres"]["image"] == POSTGRES_IMAGE
    assert "healthcheck" in services["postgres"]
    urls = {
        name: s["environment"]["DATABASE_URL"]
        for name, s in services.items()
        if "DATABASE_URL" in s.get("environment", {})
    }
    assert set(urls) == {"instance", "code-server", "dagster-webserver", "dagster-daemon", "query"}
    assert len(set(urls.values())) == 1 and "@postgres:5432/" in next(iter(urls.values()))
    # `chunkyard instance` writes dagster.yaml once Postgres is healthy; the Dagster services start after it.
    assert services["instance"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["query"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("code-server", "dagster-webserver", "dagster-daemon"):
        assert services[name]["depends_on"]["instance"]["condition"] == "service_completed_successfully"
    for name in ("dagster-webserver", "dagster-daemon"):  # the code server loads the code for both
        assert services[name]["depends_on"]["code-server"]["condition"] == "service_healthy"
    assert "ports" not in services["code-server"]  # on the services' network only
    for name in ("instance", "code-server", "dagster-webserver", "dagster-daemon", "query", "ui-proxy"):
        service = services[name]
        assert service["build"]["dockerfile"] == "docker/Dockerfile"
        # dagster.yaml names the password by DAGSTER_PG_PASSWORD: secret_env sets it from the secret
        assert service["entrypoint"][-1] == "chunkyard.orchestration.secret_env"
    assert "ports" not in services["dagster-webserver"]  # the UI is published through ui-proxy only
    assert services["ui-proxy"]["ports"] == ["${CHUNKYARD_BIND:-127.0.0.1}:3000:3000"]
    assert services["query"]["ports"] == ["${CHUNKYARD_BIND:-127.0.0.1}:8000:8000"]
    commands = " ".join(" ".join(s.get("command", [])) for s in services.values())
    assert "-w /var/lib/chunkyard/dagster/workspace.yaml" in commands  # the code location `chunkyard`
    cli_commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert {"instance", "serve", "ui-proxy"} <= cli_commands
    dockerfile = (REPO_ROOT / "docker" / "Dockerfile").read_text()
    assert "torch==2.13.0" in dockerfile and "FROM python:3.11" in dockerfile
    for path in (
        "chunking/",
        "retrieval/",
        "evaluation/",
        "pipeline/",
        "assets/",
        "orchestration/",
        "configs/",
        "docs/",
    ):
        assert f"COPY {path}" in dockerfile
