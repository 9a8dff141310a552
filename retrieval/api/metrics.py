"""Prometheus metrics of one service app (`GET /metrics`): requests, search stages, pool, indexes, models.

Counted per process in the app's own registry (prometheus-client); what reads the database
(index lag, last publish) is read when scraped. Labels never carry a query, a document or a key.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from chunkyard.retrieval.api.auth import AuthError, Caller
from chunkyard.retrieval.embedders.embedder import model_load_seconds
from chunkyard.retrieval.indexing.lag import index_lag
from chunkyard.retrieval.store import Store
from fastapi import Depends, FastAPI, HTTPException, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("chunkyard.service")
OPEN_ENV = "CHUNKYARD_METRICS_OPEN"  # "1": /metrics answers without a key (a scraper on a private network)
# The search stages the timings report, by the name the metrics give them.
STAGES = {
    "embed_ms": "embed_query",
    "dense_ms": "dense",
    "bm25_ms": "bm25",
    "fuse_ms": "fusion",
    "context_ms": "context",
    "collapse_ms": "collapse",
    "fetch_ms": "fetch",
    "mmr_ms": "mmr",
    "rerank_ms": "rerank",
    "parent_ms": "parents",
    "total_ms": "total",
}
_STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    """The app's metrics and the registry `/metrics` renders."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "chunkyard_requests",
            "HTTP requests answered, by route template, index, search mode and status code.",
            ["route", "index", "mode", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "chunkyard_request_duration_seconds",
            "HTTP request latency by route template.",
            ["route"],
            buckets=_STAGE_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "chunkyard_requests_in_flight", "HTTP requests being answered now.", registry=self.registry
        )
        self.stages = Histogram(
            "chunkyard_search_stage_duration_seconds",
            "Time per search stage (embed_query, dense, bm25, fusion, rerank, ...), by index and mode.",
            ["stage", "index", "mode"],
            buckets=_STAGE_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StateCollector(store))
        self._stage_children: dict[tuple[str, str, str], Any] = {}  # labels() once per combination

    def observe_search(self, index: str, mode: str, timings: dict[str, float]) -> None:
        """One search's stage timings (milliseconds, as the response reports them)."""
        children = self._stage_children
        for key, milliseconds in timings.items():
            stage = STAGES.get(key)
            if stage is None:
                continue
            child = children.get((stage, index, mode))
            if child is None:
                child = children[(stage, index, mode)] = self.stages.labels(stage, index, mode)
            child.observe(milliseconds / 1000)

    def render(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class _StateCollector(Collector):
    """Read when scraped: the connection pool, each published index's lag and publish time, model loads."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store

    def describe(self) -> Iterable[Any]:
        return []  # collected lazily: no database read at registration

    def collect(self) -> Iterable[GaugeMetricFamily]:
        store = self._store()
        pool = GaugeMetricFamily(
            "chunkyard_db_pool_connections",
            "Database connections of this process, by state.",
            labels=["state"],
        )
        pool.add_metric(["in_use"], store.connections_in_use)
        pool.add_metric(["idle"], store.connections_idle)
        yield pool
        yield GaugeMetricFamily(
            "chunkyard_db_pool_size", "Idle connections the pool keeps at most.", value=store.pool_size
        )
        loads = GaugeMetricFamily(
            "chunkyard_model_load_seconds", "Seconds this process took to load each model.", labels=["model"]
        )
        for model, seconds in model_load_seconds().items():
            loads.add_metric([model], seconds)
        yield loads
        behind = GaugeMetricFamily(
            "chunkyard_index_lag_documents",
            "Documents the index lacks, holds an older version of, or still serves after deletion.",
            labels=["index"],
        )
        oldest = GaugeMetricFamily(
            "chunkyard_index_lag_seconds",
            "Age of the oldest document change the index does not hold yet (0: none).",
            labels=["index"],
        )
        published = GaugeMetricFamily(
            "chunkyard_index_last_publish_timestamp_seconds",
            "When the index was last published (Unix time).",
            labels=["index"],
        )
        version = GaugeMetricFamily(
            "chunkyard_index_version", "The index's published version.", labels=["index"]
        )
        try:
            now = datetime.now(UTC)
            for info in store.indexes.list():
                if not info["version"] or "@" in info["name"]:  # unpublished, or an alias's snapshot
                    continue
                name = info["name"]
                lag = index_lag(store, name, info["collection"])
                behind.add_metric([name], lag.documents_behind)
                age = (now - lag.oldest_change).total_seconds() if lag.oldest_change else 0.0
                oldest.add_metric([name], max(0.0, age))
                if info["published_at"]:
                    published.add_metric([name], datetime.fromisoformat(info["published_at"]).timestamp())
                version.add_metric([name], info["version"])
        except Exception as exc:  # a scrape during an outage still gets the process's own metrics
            log.warning("metrics: index state unavailable: %s: %s", type(exc).__name__, exc)
        yield from (behind, oldest, published, version)


class MetricsMiddleware:
    """Counts every HTTP request by route template (never the raw path), index, mode and status."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            state = scope.get("state") or {}
            index, mode = state.get("metrics_index", ""), state.get("metrics_mode", "")
            self.metrics.requests.labels(template, index, mode, str(status)).inc()
            self.metrics.latency.labels(template).observe(time.perf_counter() - started)


def metrics_open() -> bool:
    return os.environ.get(OPEN_ENV, "").strip().lower() in ("1", "true", "yes")


def add_metrics_route(app: FastAPI, metrics: ServiceMetrics, require_key: Callable[..., Caller]) -> None:
    """`GET /metrics` in Prometheus' text format (an admin key, or none with CHUNKYARD_METRICS_OPEN=1),
    and the middleware that counts every request."""
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if metrics_open():

        @app.get("/metrics", include_in_schema=False)
        def open_metrics() -> Response:
            return metrics.render()

        return

    @app.get("/metrics", include_in_schema=False)
    def guarded_metrics(caller: Caller = Depends(require_key)) -> Response:
        try:
            caller.require_admin()
        except AuthError as exc:
            raise HTTPException(status_code=exc.status, detail=exc.detail) from None
        return metrics.render()
