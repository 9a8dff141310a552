"""The generated Dagster instance: storage on chunkyard's database, and no secret in the file."""

from __future__ import annotations

import stat
from urllib.parse import urlsplit, urlunsplit

import yaml
from chunkyard.orchestration.instance import PASSWORD_ENV, ensure_instance


def _with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.netloc.split("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def test_dagster_yaml_holds_no_password_and_is_owner_only(pg_url, tmp_path, monkeypatch) -> None:
    """The password is named by an environment variable, the file is mode 600, and Dagster still
    reaches its storage through it (the embedded server accepts the socket user without a password)."""
    from dagster import DagsterInstance

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    home = ensure_instance(_with_password(pg_url, "s3cr3t-pa55"))
    path = home / "dagster.yaml"
    text = path.read_text()
    assert "s3cr3t-pa55" not in text
    assert yaml.safe_load(text.split("\n", 1)[1])["storage"]["postgres"]["postgres_db"]["password"] == {
        "env": PASSWORD_ENV
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs_count() >= 0


def test_a_url_without_password_is_written_whole_and_owner_only(pg_url, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    home = ensure_instance(pg_url)
    path = home / "dagster.yaml"
    assert "postgres_url" in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_workspace_names_the_stack_code_server_when_one_is_set(monkeypatch) -> None:
    """Under the stack (CHUNKYARD_CODE_SERVER), the webserver and daemon load no code themselves."""
    import pytest
    from chunkyard.orchestration.instance import (
        CODE_LOCATION,
        CODE_SERVER_ENV,
        DEFINITIONS_MODULE,
        workspace_config,
    )

    monkeypatch.delenv(CODE_SERVER_ENV, raising=False)
    (entry,) = workspace_config()["load_from"]
    assert entry["python_module"]["module_name"] == DEFINITIONS_MODULE
    monkeypatch.setenv(CODE_SERVER_ENV, "code-server:4000")
    assert workspace_config()["load_from"] == [
        {"grpc_server": {"host": "code-server", "port": 4000, "location_name": CODE_LOCATION}}
    ]
    monkeypatch.setenv(CODE_SERVER_ENV, "code-server")
    with pytest.raises(ValueError, match=CODE_SERVER_ENV):
        workspace_config()
