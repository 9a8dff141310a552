"""The executor's modes: multiprocess by default, celery when a broker is configured, run config chooses."""

from __future__ import annotations

import pytest
from dagster import AssetSelection, Definitions, asset, define_asset_job
from dagster._core.definitions.run_config import RunConfig
from dagster._core.execution.api import create_execution_plan

from assets.executors import BACKEND_ENV, BROKER_ENV, build_executor, default_mode_config


def test_default_mode_follows_the_broker_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BROKER_ENV, raising=False)
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    assert default_mode_config() == {"multiprocess": {}}
    assert build_executor().config_schema.default_value == {"multiprocess": {}}
    monkeypatch.setenv(BROKER_ENV, "redis://broker:6379/0")
    assert default_mode_config() == {
        "celery": {"broker": "redis://broker:6379/0", "backend": "redis://broker:6379/0"}
    }
    monkeypatch.setenv(BACKEND_ENV, "redis://broker:6379/1")
    assert build_executor().config_schema.default_value["celery"]["backend"] == "redis://broker:6379/1"


@pytest.mark.parametrize(
    ("mode", "config"),
    [
        ("in_process", {}),
        ("multiprocess", {"max_concurrent": 2}),
        ("celery", {"broker": "redis://127.0.0.1:1/0", "backend": "redis://127.0.0.1:1/0"}),
    ],
)
def test_each_mode_is_accepted_by_the_run_config(mode: str, config: dict) -> None:
    @asset
    def one() -> None:
        return None

    job = define_asset_job("modes", selection=AssetSelection.all())
    defs = Definitions(assets=[one], jobs=[job], executor=build_executor())
    resolved = defs.resolve_job_def("modes")
    run_config = RunConfig(execution={"config": {mode: config}})
    # validates the execution block against the executor's schema (raises on an unknown mode or key)
    assert create_execution_plan(resolved, run_config=run_config.to_config_dict()).step_keys_to_execute
