"""Shared helper for the command-line tests (no tests here): `chunkyard` run as a person runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "chunkyard.orchestration.cli"]
# the variables that name a project or its state: a person's shell in a fresh folder has none of them
STATE_VARIABLES = (
    "CHUNKYARD_PROJECT",
    "CHUNKYARD_PROJECT_DIR",
    "CHUNKYARD_HOME",
    "CHUNKYARD_CONFIGS",
    "CHUNKYARD_BENCHMARKS",
    "DATABASE_URL",
    "DAGSTER_HOME",
)


def cli_env(*also_unset: str) -> dict[str, str]:
    """This process's environment without STATE_VARIABLES (and `also_unset`), for a `chunkyard` child."""
    dropped = {*STATE_VARIABLES, *also_unset}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def run_cli(
    argv: list[str], cwd: Path, timeout: float = 900, also_unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`chunkyard ARGV` in `cwd` as its own process, its output captured as text."""
    return subprocess.run(
        [*CLI, *argv], cwd=cwd, env=cli_env(*also_unset), capture_output=True, text=True, timeout=timeout
    )


def unset_state(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """STATE_VARIABLES removed from this process until the test ends (set first, so that what main()
    sets, such as CHUNKYARD_PROJECT, is restored after too)."""
    for name in STATE_VARIABLES:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch
