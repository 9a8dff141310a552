"""Compose's Prometheus and Grafana: what they scrape and chart is what the query service exports."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.query import Searcher
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO_ROOT

DOCKER = REPO_ROOT / "docker"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text(encoding="utf-8"))


def test_prometheus_scrapes_the_query_service_with_the_key(compose: dict) -> None:
    prometheus = compose["services"]["prometheus"]
    assert re.fullmatch(r"prom/prometheus:v\d+\.\d+\.\d+", prometheus["image"])
    assert prometheus["secrets"] == ["api_key"] and prometheus["ports"] == ["127.0.0.1:9090:9090"]
    mount = next(v for v in prometheus["volumes"] if v.endswith("/etc/prometheus/prometheus.yml:ro"))
    config = yaml.safe_load((DOCKER / mount.split(":")[0]).read_text(encoding="utf-8"))
    (job,) = config["scrape_configs"]
    query_port = compose["services"]["query"]["command"][-1]
    assert (
        job["static_configs"] == [{"targets": [f"query:{query_port}"]}] and job["metrics_path"] == "/metrics"
    )
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/run/secrets/api_key"}


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(compose: dict) -> None:
    grafana = compose["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/api_key"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["ports"] == ["127.0.0.1:3001:3001"]
    source = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (datasource,) = source["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    dashboard = json.loads((DOCKER / "grafana/dashboards/chunkyard.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {datasource["uid"]}


def test_the_dashboard_charts_only_metrics_the_service_exports(store) -> None:
    http = TestClient(create_app(Searcher(store), api_key="dashboard-key"))
    http.get("/healthz")
    text = http.get("/metrics", headers={"X-API-Key": "dashboard-key"}).text
    exported = {family.name for family in text_string_to_metric_families(text)}
    dashboard = json.loads((DOCKER / "grafana/dashboards/chunkyard.json").read_text())
    used = {
        re.sub(r"_(bucket|total|count|sum)$", "", name)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bchunkyard_[a-z_]+", target["expr"])
    }
    assert used and used <= exported, used - exported
    for stage in ("embed_query", "dense", "bm25", "fusion", "rerank"):  # the stages have names
        from chunkyard.retrieval.api.metrics import STAGES

        assert stage in STAGES.values()
