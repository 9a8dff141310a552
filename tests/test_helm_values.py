"""docker/helm/values.yaml: parses, and uses the keys Dagster's Helm chart (dagster/dagster) reads.

No cluster or helm binary here: the keys are checked against the chart's values schema
(helm/dagster/schema in dagster-io/dagster: DagsterHelmValues, RunLauncher, PostgreSQL,
UserDeployment, Concurrency), and the values against chunkyard's own settings.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from chunkyard.orchestration.instance import (
    DEFAULT_POOL_LIMIT,
    MAX_CONCURRENT_RUNS,
    PASSWORD_ENV,
    instance_config,
)

VALUES = Path(__file__).resolve().parent.parent / "docker" / "helm" / "values.yaml"
# Top-level keys of the chart's DagsterHelmValues (a values file may set any subset).
CHART_KEYS = {
    "dagsterWebserver",
    "dagster-user-deployments",
    "postgresql",
    "generatePostgresqlPasswordSecret",
    "generateCeleryConfigSecret",
    "rabbitmq",
    "redis",
    "flower",
    "ingress",
    "imagePullSecrets",
    "computeLogManager",
    "scheduler",
    "runLauncher",
    "pythonLogs",
    "dagsterDaemon",
    "busybox",
    "migrate",
    "telemetry",
    "serviceAccount",
    "global",
    "retention",
    "additionalInstanceConfig",
    "concurrency",
}
RUN_LAUNCHERS = {"K8sRunLauncher": "k8sRunLauncher", "CeleryK8sRunLauncher": "celeryK8sRunLauncher"}


def test_helm_values_use_the_charts_keys_and_chunkyards_settings() -> None:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    assert set(values) <= CHART_KEYS, set(values) - CHART_KEYS

    # Runs as Kubernetes Jobs; the launcher's config block is the one its type names.
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    assert set(launcher["config"]) == {RUN_LAUNCHERS[launcher["type"]]}
    assert {"name": "chunkyard-env"} in launcher["config"]["k8sRunLauncher"]["envSecrets"]

    # The user's Postgres (pgvector), reached by host; Dagster's tables in the `dagster` schema.
    postgres = values["postgresql"]
    assert postgres["enabled"] is False and postgres["postgresqlHost"]
    assert {"postgresqlUsername", "postgresqlDatabase", "service"} <= set(postgres)
    assert "postgresqlPassword" not in postgres  # from the secret, never in the file
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"]
    storage = instance_config("postgresql://u:secret@db:5432/chunkyard")["storage"]["postgres"]["postgres_db"]
    assert storage["password"] == {"env": PASSWORD_ENV}  # the chart names the same variable
    assert postgres["postgresqlParams"] == {"options": storage["params"]["options"]}

    # The code location is chunkyard's definitions, loaded by `dagster api grpc`.
    users = values["dagster-user-deployments"]
    assert users["enabled"] is True
    (deployment,) = users["deployments"]
    assert {"name", "image", "dagsterApiGrpcArgs", "port"} <= set(deployment)
    assert {"repository", "tag", "pullPolicy"} <= set(deployment["image"])
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "chunkyard.assets.definitions"]
    assert {"name": "chunkyard-env"} in deployment["envSecrets"]

    # Same run queue and pools as the dagster.yaml `chunkyard instance` writes.
    ours = instance_config("postgresql:///chunkyard")["concurrency"]
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["type"] == "QueuedRunCoordinator"
    assert coordinator["config"]["queuedRunCoordinator"]["maxConcurrentRuns"] == MAX_CONCURRENT_RUNS
    assert values["concurrency"]["pools"] == {
        "defaultLimit": DEFAULT_POOL_LIMIT,
        "granularity": ours["pools"]["granularity"],
    }
    for image in (values["dagsterWebserver"]["image"], values["dagsterDaemon"]["image"]):
        assert image["tag"] == "1.13.27"  # the pinned Dagster
