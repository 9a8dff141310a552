"""docker/docker-compose.yml is safe to expose (no Docker engine here: the generated file is linted).

Loopback-published ports (the query service where CHUNKYARD_BIND says, with a key), no default
password or key (Compose secrets from files), a TCP readiness probe, health timeouts sized for load,
an exact pgvector tag; and the pieces those entries rely on: the URL-encoding of the password, the
query service refusing to listen beyond loopback without a key, `chunkyard instance` waiting for
the database.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import yaml

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO_ROOT / "docker" / "docker-compose.yml").read_text(encoding="utf-8"))


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", value)
    assert match, value
    return int(match[1]) * (60 if match[2] == "m" else 1)


def test_ports_are_published_on_loopback_only(compose: dict) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            host = port.rsplit(":", 2)[0]
            if name == "query":  # configurable, loopback unless configured; it needs the API key
                assert host == "${CHUNKYARD_BIND:-127.0.0.1}", port
            else:  # the Dagster UI has no authentication: loopback only
                assert host == "127.0.0.1", (name, port)


def test_no_default_password_or_key_only_secret_files(compose: dict) -> None:
    text = (REPO_ROOT / "docker" / "docker-compose.yml").read_text(encoding="utf-8")
    assert not re.search(r"\$\{[A-Z_]*(PASSWORD|KEY)[A-Z_]*:-", text), "a secret with a default"
    assert set(compose["secrets"]) == {"db_password", "api_key"}
    assert all(set(s) == {"file"} for s in compose["secrets"].values())
    postgres = compose["services"]["postgres"]
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/db_password"
    for name, service in compose["services"].items():
        env = service.get("environment", {})
        assert "CHUNKYARD_API_KEY" not in env and "DAGSTER_PG_PASSWORD" not in env, name
        if name != "postgres":
            url = psycopg.conninfo.conninfo_to_dict(env["DATABASE_URL"])
            assert "password" not in url, name  # added from the secret at start (secret_env)
            assert service["entrypoint"] == ["python", "-m", "orchestration.secret_env"], name
            assert "db_password" in service["secrets"], name
    query = compose["services"]["query"]
    assert query["environment"]["CHUNKYARD_API_KEY_FILE"] == "/run/secrets/api_key"
    assert "api_key" in query["secrets"]


def test_health_checks_probe_tcp_and_wait_long_enough(compose: dict) -> None:
    postgres = compose["services"]["postgres"]["healthcheck"]["test"]
    assert "pg_isready -h 127.0.0.1" in " ".join(postgres)  # not the socket the init answers on
    for name, service in compose["services"].items():
        check = service.get("healthcheck")
        if check is None:
            continue
        assert _seconds(check["timeout"]) >= 20, name  # liveness-check took 5.2-6.7 s at load 12
        assert _seconds(check["interval"]) <= _seconds(check["timeout"]) + 60, name
        if "liveness-check" in check["test"]:  # reaches the database: needs the secret too
            assert check["test"][1:4] == ["python", "-m", "orchestration.secret_env"]
    assert compose["services"]["instance"]["restart"] == "on-failure"


def test_the_pgvector_image_is_an_exact_version(compose: dict) -> None:
    image = compose["services"]["postgres"]["image"]
    assert re.fullmatch(r"pgvector/pgvector:\d+\.\d+\.\d+-pg\d+(@sha256:[0-9a-f]{64})?", image), image


def test_the_password_is_url_encoded_into_database_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestration.secret_env import PASSWORD_FILE_ENV, apply_secrets
    from orchestration.stack_local import local_target

    secret = tmp_path / "db_password"
    secret.write_text("p@ss/w:rd%#?\n", encoding="utf-8")
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(secret))
    env = apply_secrets({"DATABASE_URL": "postgresql://chunkyard@postgres:5432/chunkyard"})
    parsed = psycopg.conninfo.conninfo_to_dict(env["DATABASE_URL"])
    assert (parsed["host"], parsed["password"], parsed["dbname"]) == ("postgres", "p@ss/w:rd%#?", "chunkyard")
    assert env["DAGSTER_PG_PASSWORD"] == "p@ss/w:rd%#?"
    local = local_target(tmp_path, None, secret="p@ss/w:rd")  # the local stack encodes it too
    assert psycopg.conninfo.conninfo_to_dict(local.database_url())["password"] == "p@ss/w:rd"


def test_the_query_service_refuses_to_listen_beyond_loopback_without_a_key(tmp_path: Path) -> None:
    from retrieval.http_guards import exposure_error

    assert exposure_error("127.0.0.1", None) is None and exposure_error("::1", None) is None
    assert exposure_error("0.0.0.0", "k") is None
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.org"):
        assert "API key" in (exposure_error(host, None) or ""), host
    env = {k: v for k, v in __import__("os").environ.items() if k != "CHUNKYARD_API_KEY"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    assert "needs an API key" in done.stderr and len(done.stderr.strip().splitlines()) <= 2, done.stderr


def test_instance_waits_for_a_database_that_is_not_up_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused connection is retried for CHUNKYARD_DB_WAIT seconds, then reported."""
    import socket
    import time

    from orchestration.instance import CONNECT_WAIT_ENV, create_dagster_schema

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(CONNECT_WAIT_ENV, "2")
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        create_dagster_schema(f"postgresql://u:p@127.0.0.1:{port}/db")
    assert time.monotonic() - started >= 2
