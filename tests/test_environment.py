"""Whole-number settings from the environment: blank means the default, bad values name the variable."""

import pytest
from chunkyard.chunking.environment import EnvironmentSettingError, env_int


def test_env_int_reads_defaults_bounds_and_names_the_variable(monkeypatch) -> None:
    monkeypatch.delenv("CHUNKYARD_TEST_N", raising=False)
    assert env_int("CHUNKYARD_TEST_N", 7) == 7
    monkeypatch.setenv("CHUNKYARD_TEST_N", "  ")
    assert env_int("CHUNKYARD_TEST_N", None) is None
    monkeypatch.setenv("CHUNKYARD_TEST_N", "12")
    assert env_int("CHUNKYARD_TEST_N", 7) == 12
    monkeypatch.setenv("CHUNKYARD_TEST_N", "0")
    with pytest.raises(EnvironmentSettingError, match="CHUNKYARD_TEST_N: must be at least 1"):
        env_int("CHUNKYARD_TEST_N", 7)
    monkeypatch.setenv("CHUNKYARD_TEST_N", "lots")
    with pytest.raises(ValueError, match="CHUNKYARD_TEST_N: expected whole seconds"):
        env_int("CHUNKYARD_TEST_N", 7, unit="whole seconds")
