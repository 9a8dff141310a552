"""One reader of number settings from the environment (errors name the variable) behind the service's
admission, server and key limits; one declaration of the index config's fields behind the loader's
allowed fields and the evaluation's hashed ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunkyard.chunking.environment import EnvironmentSettingError, env_float
from chunkyard.pipeline.steps import evaluation as evaluation_step
from chunkyard.retrieval.api.admission import LATENCY_ENV, AdmissionLimits
from chunkyard.retrieval.api.rate_limits import CONCURRENCY_ENV, RATE_ENV, Limits
from chunkyard.retrieval.api.server_limits import (
    BODY_TIMEOUT_ENV,
    HEADER_TIMEOUT_ENV,
    MAX_CONNECTIONS_ENV,
    ServerLimits,
)
from chunkyard.retrieval.settings.config import SettingsError, load_index_configs
from chunkyard.retrieval.settings.config_fields import EVALUATED_FIELDS, INDEX_FIELDS


def test_env_float_reads_bounds_and_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHUNKYARD_TEST_NUMBER", raising=False)
    assert env_float("CHUNKYARD_TEST_NUMBER", 2.5) == 2.5
    monkeypatch.setenv("CHUNKYARD_TEST_NUMBER", " 0.25 ")
    assert env_float("CHUNKYARD_TEST_NUMBER", 2.5, above_minimum=True, maximum=1) == 0.25
    for raw, message in (
        ("soon", "CHUNKYARD_TEST_NUMBER: expected a number of seconds, got 'soon'"),
        ("0", "CHUNKYARD_TEST_NUMBER: must be more than 0 and at most 10, got 0"),
        ("11", "CHUNKYARD_TEST_NUMBER: must be more than 0 and at most 10, got 11"),
        ("nan", "CHUNKYARD_TEST_NUMBER: must be more than 0 and at most 10, got nan"),
    ):
        monkeypatch.setenv("CHUNKYARD_TEST_NUMBER", raw)
        with pytest.raises(EnvironmentSettingError) as error:
            env_float("CHUNKYARD_TEST_NUMBER", 1, above_minimum=True, maximum=10, unit="a number of seconds")
        assert str(error.value) == message
    monkeypatch.setenv("CHUNKYARD_TEST_NUMBER", "inf")
    with pytest.raises(EnvironmentSettingError, match="must be at least 0, got inf"):
        env_float("CHUNKYARD_TEST_NUMBER", 1)


@pytest.mark.parametrize(
    ("variable", "raw", "read", "message"),
    [
        (LATENCY_ENV, "soon", AdmissionLimits.from_env, "expected a number of seconds"),
        (LATENCY_ENV, "601", AdmissionLimits.from_env, "must be more than 0 and at most 600"),
        (HEADER_TIMEOUT_ENV, "-1", ServerLimits.from_env, "must be more than 0 and at most 3600"),
        (BODY_TIMEOUT_ENV, "x", ServerLimits.from_env, "expected a number of seconds"),
        (MAX_CONNECTIONS_ENV, "0", ServerLimits.from_env, "must be at least 1"),
        (MAX_CONNECTIONS_ENV, "1.5", ServerLimits.from_env, "expected an integer"),
        (RATE_ENV, "-2", Limits.from_environment, "must be at least 0"),
        (RATE_ENV, "fast", Limits.from_environment, "expected a number (0: no limit)"),
        (CONCURRENCY_ENV, "-1", Limits.from_environment, "must be at least 0"),
    ],
)
def test_every_limit_setting_is_read_by_the_shared_readers(
    monkeypatch: pytest.MonkeyPatch, variable: str, raw: str, read, message: str
) -> None:
    monkeypatch.setenv(variable, raw)
    with pytest.raises(EnvironmentSettingError) as error:
        read()
    assert str(error.value).startswith(f"{variable}: {message}")


def test_the_limit_settings_still_read_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (
        (LATENCY_ENV, "1.5"),
        (HEADER_TIMEOUT_ENV, "30"),
        (MAX_CONNECTIONS_ENV, "7"),
        (RATE_ENV, "0"),
        (CONCURRENCY_ENV, "0"),
    ):
        monkeypatch.setenv(name, value)
    assert AdmissionLimits.from_env().latency_s == 1.5
    server = ServerLimits.from_env()
    assert server.header_timeout_s == 30 and server.max_connections == 7
    assert Limits.from_environment() == Limits(rate_per_s=0, max_concurrent=0)  # 0: no limit


def test_the_evaluated_fields_are_declared_with_the_index_configs_fields(tmp_path: Path) -> None:
    assert evaluation_step.SETTINGS is EVALUATED_FIELDS
    assert set(EVALUATED_FIELDS) < set(INDEX_FIELDS)
    # the order the evaluation's code version has always hashed: reports made before stay current
    assert EVALUATED_FIELDS == (
        "chunker",
        "embedding_model",
        "embedder",
        "bm25",
        "hybrid",
        "rerank",
        "context_scoring",
        "collapse_duplicates",
        "coarse",
    )
    # the loader allows exactly the declared fields, and names them when refusing another
    path = tmp_path / "indexes.yaml"
    path.write_text(
        "indexes:\n  small:\n    chunker: {strategy: token, size: 64}\n    description: tiny\n"
        "    allow_truncation: true\n  odd:\n    chunker: {strategy: token, size: 64}\n    colour: red\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError) as error:
        load_index_configs(path)
    assert f"allowed {sorted(INDEX_FIELDS)}" in str(error.value) and "indexes.odd" in str(error.value)
    path.write_text(path.read_text(encoding="utf-8").split("  odd:")[0], encoding="utf-8")
    assert load_index_configs(path)["small"].description == "tiny"
