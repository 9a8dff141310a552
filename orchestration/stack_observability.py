"""Compose's monitoring services: Prometheus scraping the query service's `/metrics`, and Grafana with its dashboard.

Compose only (`chunkyard stack up` runs none of them: a local stack is scraped by a Prometheus of
one's own). Prometheus reads the API key from the `api_key` secret (`/metrics` wants an admin key)
and keeps its data in a volume; Grafana is provisioned with that Prometheus as its data source and
`docker/grafana/dashboards/chunkyard.json`, and its admin password is the same secret (user `admin`).
Both are published on loopback only.
"""

from __future__ import annotations

from typing import Any

# Exact tags, as for Postgres (no floating `latest`).
PROMETHEUS_IMAGE = "prom/prometheus:v3.5.0"
GRAFANA_IMAGE = "grafana/grafana:12.1.0"
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3001  # 3000 is the Dagster UI's (the ui-proxy)
PROMETHEUS_CONFIG = "./prometheus.yml"  # docker/prometheus.yml, beside the Compose file
SCRAPE_INTERVAL = "15s"


def observability_services() -> dict[str, dict[str, Any]]:
    """The `prometheus` and `grafana` entries of Compose's `services:`."""
    return {
        "prometheus": {
            "image": PROMETHEUS_IMAGE,
            "command": [
                "--config.file=/etc/prometheus/prometheus.yml",
                "--storage.tsdb.path=/prometheus",
                "--storage.tsdb.retention.time=15d",
            ],
            "volumes": [
                f"{PROMETHEUS_CONFIG}:/etc/prometheus/prometheus.yml:ro",
                "prometheus-data:/prometheus",
            ],
            "secrets": ["api_key"],  # the scrape's bearer credentials (docker/prometheus.yml)
            "depends_on": {"query": {"condition": "service_healthy"}},
            "ports": [f"127.0.0.1:{PROMETHEUS_PORT}:{PROMETHEUS_PORT}"],
            "healthcheck": {
                "test": [
                    "CMD",
                    "wget",
                    "-q",
                    "-O",
                    "/dev/null",
                    f"http://127.0.0.1:{PROMETHEUS_PORT}/-/ready",
                ],
                "interval": "15s",
                "timeout": "30s",
                "retries": 20,
                "start_period": "30s",
            },
            "restart": "unless-stopped",
        },
        "grafana": {
            "image": GRAFANA_IMAGE,
            "environment": {
                "GF_SECURITY_ADMIN_USER": "admin",
                "GF_SECURITY_ADMIN_PASSWORD__FILE": "/run/secrets/api_key",
                "GF_AUTH_ANONYMOUS_ENABLED": "false",
                "GF_SERVER_HTTP_PORT": str(GRAFANA_PORT),
                "GF_ANALYTICS_REPORTING_ENABLED": "false",
                "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
            },
            "volumes": [
                "./grafana/provisioning:/etc/grafana/provisioning:ro",
                "./grafana/dashboards:/var/lib/grafana/dashboards:ro",
                "grafana-data:/var/lib/grafana",
            ],
            "secrets": ["api_key"],
            "depends_on": {"prometheus": {"condition": "service_healthy"}},
            "ports": [f"127.0.0.1:{GRAFANA_PORT}:{GRAFANA_PORT}"],
            "healthcheck": {
                "test": [
                    "CMD",
                    "wget",
                    "-q",
                    "-O",
                    "/dev/null",
                    f"http://127.0.0.1:{GRAFANA_PORT}/api/health",
                ],
                "interval": "15s",
                "timeout": "30s",
                "retries": 20,
                "start_period": "60s",
            },
            "restart": "unless-stopped",
        },
    }


OBSERVABILITY_VOLUMES = ("prometheus-data", "grafana-data")
