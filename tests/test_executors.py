"""The executor's modes: multiprocess by default, celery when a broker is configured, run config chooses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chunkyard.assets.executors import BACKEND_ENV, BROKER_ENV, build_executor, default_executor_config
from dagster import AssetSelection, Definitions, asset, define_asset_job, validate_run_config

from tests.conftest import REPO_ROOT


def test_default_mode_follows_the_broker_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BROKER_ENV, raising=False)
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    assert default_executor_config() == {"multiprocess": {}}
    assert build_executor().config_schema.default_value == {"multiprocess": {}}
    monkeypatch.setenv(BROKER_ENV, "redis://broker:6379/0")
    assert default_executor_config() == {
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
    execution = {"execution": {"config": {mode: config}}}
    assert mode in validate_run_config(resolved, execution)["execution"]["chunkyard"]
    with pytest.raises(Exception, match="threads|unknown|Received unexpected config entry"):
        validate_run_config(resolved, {"execution": {"config": {"threads": {}}}})


PROBE = """
import os
from pathlib import Path

from dagster import Definitions, asset

from chunkyard.assets.executors import build_executor

OUT = Path(os.environ["PROBE_OUT"])


@asset
def first() -> None:
    (OUT / "first").write_text(str(os.getpid()))


@asset(deps=[first])
def second() -> None:
    (OUT / "second").write_text(str(os.getpid()))


defs = Definitions(assets=[first, second], executor=build_executor())
"""


@pytest.mark.parametrize("mode", ["in_process", "multiprocess"])
def test_each_local_mode_runs_its_steps_where_it_says(tmp_path: Path, mode: str) -> None:
    """A real run through `dagster asset materialize`: in_process runs both steps in one process,
    multiprocess each in its own."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    (tmp_path / "home").mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in (BROKER_ENV, "DATABASE_URL")},
        "DAGSTER_HOME": str(tmp_path / "home"),
        "PROBE_OUT": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    config = json.dumps({"execution": {"config": {mode: {}}}})
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "asset", "materialize", "-f", str(probe), "--select", "*"]
        + ["--config-json", config],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pids = {(tmp_path / name).read_text() for name in ("first", "second")}
    assert len(pids) == (1 if mode == "in_process" else 2), pids
