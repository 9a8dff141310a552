"""The generated dagster.yaml turns on Dagster's run monitoring, and the instance loads it."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_instance_loads_run_monitoring(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chunkyard.orchestration.instance import (
        FREE_SLOTS_AFTER_RUN_END_SECONDS,
        MAX_RUN_SECONDS_ENV,
        RUN_START_TIMEOUT_SECONDS,
        ensure_instance,
    )
    from dagster import DagsterInstance

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv(MAX_RUN_SECONDS_ENV, "7200")
    ensure_instance(pg_url)
    instance = DagsterInstance.get()
    try:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == RUN_START_TIMEOUT_SECONDS
        assert instance.run_monitoring_max_resume_run_attempts == 0
        settings = instance.run_monitoring_settings
        assert settings["free_slots_after_run_end_seconds"] == FREE_SLOTS_AFTER_RUN_END_SECONDS
        assert settings["max_runtime_seconds"] == 7200
        assert "MONITORING" in instance.get_required_daemon_types()  # the daemon runs it
    finally:
        instance.dispose()


def test_max_run_seconds_must_be_whole_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    from chunkyard.orchestration.instance import MAX_RUN_SECONDS_ENV, run_monitoring_config

    monkeypatch.delenv(MAX_RUN_SECONDS_ENV, raising=False)
    assert "max_runtime_seconds" not in run_monitoring_config()  # a first build may take hours
    for bad in ("0", "an hour"):
        monkeypatch.setenv(MAX_RUN_SECONDS_ENV, bad)
        with pytest.raises(ValueError, match=MAX_RUN_SECONDS_ENV):
            run_monitoring_config()
