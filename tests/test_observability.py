"""`/metrics` read with Prometheus' own text parser, and one search's trace with the SDK's in-memory exporter."""

from __future__ import annotations

import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.key_admin import create_key
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.store import Store
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.test_indexing_support import ParagraphChunker, make_spec

KEY = "observability-key"
QUERY = "Which lighthouse guides the ships past the reef?"
TEXT = "Lighthouses guide ships past the reef."


@pytest.fixture(scope="module")
def searcher(pg_url: str, embedder) -> Searcher:
    store = Store(pg_url)
    store.migrate()
    return Searcher(store, embedder)


@pytest.fixture(scope="module")
def index_name(searcher: Searcher, embedder) -> str:
    spec = make_spec(bm25={"analyzer": "english"})
    docs = [Document("a.md", TEXT), Document("b.md", "Queues hold pending work.")]
    searcher.store.documents.sync(spec.collection, docs, [])
    build_index(searcher.store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return str(spec.name)


def _scrape(http: TestClient) -> dict[str, list]:
    response = http.get("/metrics", headers={"X-API-Key": KEY})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    families = {family.name: family.samples for family in text_string_to_metric_families(response.text)}
    return families


def _value(samples: list, name: str, **labels: str) -> float:
    return sum(
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_metrics_parse_and_move_with_requests(searcher: Searcher, index_name: str) -> None:
    http = TestClient(create_app(searcher, api_key=KEY))
    before = _scrape(http)
    searches = _value(before.get("chunkyard_requests", []), "chunkyard_requests_total", route="/v1/search")
    body = {"query": QUERY, "index": index_name, "k": 2, "mode": "hybrid"}
    for _ in range(2):
        assert http.post("/v1/search", json=body, headers={"X-API-Key": KEY}).status_code == 200
    assert http.post("/v1/search", json=body).status_code == 401
    after = _scrape(http)

    requests = after["chunkyard_requests"]
    labels = {"route": "/v1/search", "index": index_name, "mode": "hybrid", "status": "200"}
    assert _value(requests, "chunkyard_requests_total", **labels) == 2
    assert _value(requests, "chunkyard_requests_total", route="/v1/search", status="401") == 1
    assert _value(requests, "chunkyard_requests_total", route="/v1/search") == searches + 3
    stages = after["chunkyard_search_stage_duration_seconds"]
    for stage in ("embed_query", "dense", "bm25", "fusion", "total"):
        count = _value(
            stages,
            "chunkyard_search_stage_duration_seconds_count",
            stage=stage,
            index=index_name,
            mode="hybrid",
        )
        assert count == 2, stage
    assert _value(after["chunkyard_request_duration_seconds"], "chunkyard_request_duration_seconds_count") > 0
    assert "chunkyard_requests_in_flight" in after
    pool = after["chunkyard_db_pool_connections"]
    assert {s.labels["state"] for s in pool} == {"in_use", "idle"}
    assert _value(after["chunkyard_db_pool_size"], "chunkyard_db_pool_size") == searcher.store.pool_size
    assert (
        _value(after["chunkyard_index_lag_documents"], "chunkyard_index_lag_documents", index=index_name) == 0
    )
    published = _value(
        after["chunkyard_index_last_publish_timestamp_seconds"],
        "chunkyard_index_last_publish_timestamp_seconds",
        index=index_name,
    )
    assert published > 1_700_000_000
    assert "chunkyard_model_load_seconds" in after
    assert QUERY not in http.get("/metrics", headers={"X-API-Key": KEY}).text


def test_metrics_need_an_admin_key_unless_opened(searcher: Searcher, monkeypatch) -> None:
    _, search_token = create_key(
        searcher.store, "metrics-reader", "search", [searcher.store.keys.collections_known().pop()], actor="t"
    )
    guarded = TestClient(create_app(searcher, api_key=KEY))
    assert guarded.get("/metrics").status_code == 401
    assert guarded.get("/metrics", headers={"X-API-Key": search_token}).status_code == 403
    monkeypatch.setenv("CHUNKYARD_METRICS_OPEN", "1")
    opened = TestClient(create_app(searcher, api_key=KEY))
    assert opened.get("/metrics").status_code == 200
    assert opened.get("/v1/indexes").status_code == 401  # only /metrics is opened


@pytest.fixture(scope="module")
def exporter():
    """The in-memory exporter of this test process's tracer provider (the SDK allows one per process)."""
    from chunkyard.retrieval.observability import telemetry
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    assert telemetry.configure_tracing(exporter) is not None
    yield exporter
    exporter.shutdown()  # later tests' spans are not kept


def _no_secrets(spans, *secrets: str) -> None:
    for span in spans:
        for value in span.attributes.values():
            assert not any(secret in str(value) for secret in secrets), (span.name, value)


def test_one_search_traces_its_stages(searcher: Searcher, index_name: str, exporter) -> None:
    http = TestClient(create_app(searcher, api_key=KEY))  # instrumented: tracing is configured now
    exporter.clear()
    body = {"query": QUERY, "index": index_name, "k": 2, "mode": "hybrid"}
    assert http.post("/v1/search", json=body, headers={"X-API-Key": KEY}).status_code == 200
    spans = exporter.get_finished_spans()
    names = [span.name for span in spans]
    for stage in ("search.embed_query", "search.dense", "search.bm25", "search.fuse", "chunkyard.search"):
        assert stage in names, names
    assert any(name.startswith("POST /v1/search") for name in names), names  # the request's span
    search = next(span for span in spans if span.name == "chunkyard.search")
    assert (
        search.attributes["chunkyard.index"] == index_name and search.attributes["chunkyard.mode"] == "hybrid"
    )
    assert len({span.context.trace_id for span in spans}) == 1  # one trace: the stages are children
    _no_secrets(spans, QUERY, TEXT, KEY)


def test_indexing_steps_and_embedding_server_calls_are_spans(searcher: Searcher, embedder, exporter) -> None:
    from chunkyard.pipeline.graph import STEP_NAMES, run_index_steps
    from chunkyard.retrieval.embedders.endpoint_backend import EndpointEmbedder
    from chunkyard.retrieval.embedders.endpoint_settings import EndpointSettings

    from tests.fake_embedding_server import FakeEmbeddingServer

    spec = make_spec(chunker={"strategy": "recursive", "size": 64, "overlap": 0})
    searcher.store.documents.sync(spec.collection, [Document("a.md", TEXT)], [])
    exporter.clear()
    run_index_steps(searcher.store, spec, embedder)
    steps = {span.name: span for span in exporter.get_finished_spans() if span.name.startswith("index.")}
    assert sorted(steps) == sorted(f"index.{name}" for name in STEP_NAMES)
    assert all(span.attributes["index"] == str(spec.name) for span in steps.values())
    with FakeEmbeddingServer() as server:
        settings = EndpointSettings.from_options(
            {"backend": "openai", "url": server.url, "model": server.model}
        )
        exporter.clear()
        EndpointEmbedder("all-MiniLM-L6-v2", settings).embed([TEXT, QUERY])
    calls = [span for span in exporter.get_finished_spans() if span.name == "embedding_server.request"]
    assert (
        calls
        and calls[0].attributes["texts"] == 2
        and calls[0].attributes["http.response.status_code"] == 200
    )
    _no_secrets(calls, QUERY, TEXT)
