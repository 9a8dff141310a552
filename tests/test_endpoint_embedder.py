"""The OpenAI-compatible endpoint backend against a real fake server on loopback (tests/fake_embedding_server).

Batching within the server's limits, concurrency, retries (429 with Retry-After, 500 then success),
timeouts, dimension and model mismatches, the key kept out of errors and logs, the cache keyed on the
endpoint's model, usage in the step's metadata, and the query service's readiness. Nothing here
reaches a host other than 127.0.0.1.
"""

from __future__ import annotations

import logging
import time
import uuid

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.retrieval.embedders.endpoint_backend import EndpointEmbedder
from chunkyard.retrieval.embedders.endpoint_settings import (
    EndpointConfigError,
    EndpointError,
    EndpointSettings,
)

from tests.fake_embedding_server import FakeEmbeddingServer, fake_vector


def _embedder(server: FakeEmbeddingServer, queries: bool = False, **options: object) -> EndpointEmbedder:
    """A fresh (unshared) embedder on `server`, so usage counts and learnt dimensions start at zero."""
    settings = EndpointSettings.from_options(
        {"backend": "openai", "url": server.url, "model": server.model, **options}
    )
    return EndpointEmbedder("all-MiniLM-L6-v2", settings, queries=queries)


@pytest.fixture
def server():
    with FakeEmbeddingServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _drop_endpoint_indexes(request):
    """Indexes built here point at a fake server that stops with the test: drop them (the session's
    database is shared, and the service reports their endpoint in `/readyz`)."""
    yield
    if "store" not in request.fixturenames:
        return
    from chunkyard.retrieval.embedders.endpoint_backend import forget_shared_endpoint_embedders

    store = request.getfixturevalue("store")
    for info in store.indexes.list():
        if (info.get("config") or {}).get("embedder", {}).get("backend") == "openai":
            store.indexes.drop(info["name"])
    forget_shared_endpoint_embedders()


def test_vectors_come_back_in_input_order_batched_within_the_servers_limits(server) -> None:
    texts = [f"text number {i} " + "word " * (i % 7) for i in range(23)]
    embedder = _embedder(server, batch_size=5, batch_tokens=40, concurrency=3, dimensions=32)
    vectors = embedder.embed(texts)
    expected = np.stack([fake_vector(t, 32) for t in texts])
    np.testing.assert_allclose(vectors, expected, atol=1e-6)  # the server answers in reverse `index` order
    assert max(server.batch_sizes) <= 5
    counts = embedder.tokenizer.count_batch(texts)
    assert sum(counts) > 40 * 2  # the token limit, not only the count, cut the requests
    assert len(server.batch_sizes) >= -(-sum(counts) // 40)
    assert sorted(server.answered) == sorted(texts) and max(server.answered.values()) == 1
    usage = embedder.usage
    assert usage.requests == len(server.batch_sizes) and usage.retries == 0
    assert usage.texts == len(texts) and usage.tokens == sum(len(t.split()) for t in texts)
    assert server.max_in_flight <= 3


def test_requests_run_concurrently_up_to_the_limit() -> None:
    with FakeEmbeddingServer(delay=0.3) as server:
        embedder = _embedder(server, batch_size=1, concurrency=4, dimensions=32)
        embedder.embed([f"t{i}" for i in range(12)])
    assert server.requests == 12
    assert 2 <= server.max_in_flight <= 4


def test_429_waits_for_retry_after_then_succeeds(server) -> None:
    embedder = _embedder(server, dimensions=32)
    server.fail_next(429, retry_after="1")
    vectors = embedder.embed(["rate limited"])
    np.testing.assert_allclose(vectors[0], fake_vector("rate limited", 32), atol=1e-6)
    assert server.requests == 2 and embedder.usage.retries == 1
    assert server.arrivals[1] - server.arrivals[0] >= 0.95  # Retry-After: 1 was honoured


def test_500_then_success_is_retried_with_backoff(server) -> None:
    embedder = _embedder(server, dimensions=32)
    server.fail_next(500, times=2)
    embedder.embed(["flaky"])
    assert server.requests == 3 and embedder.usage.retries == 2
    assert server.answered["flaky"] == 1


def test_retries_stop_with_an_error_naming_the_status(server) -> None:
    embedder = _embedder(server, dimensions=32, max_retries=2)
    server.fail_next(503, times=5, retry_after="0")
    with pytest.raises(EndpointError, match=r"HTTP 503.*after 3 attempt"):
        embedder.embed(["down"])
    assert server.requests == 3


def test_a_client_error_is_not_retried(server) -> None:
    server.fail_next(400)
    with pytest.raises(EndpointError, match="HTTP 400: .*fake failure 400"):
        _embedder(server, dimensions=32).embed(["bad"])
    assert server.requests == 1


def test_timeout_is_an_error_naming_the_option() -> None:
    with FakeEmbeddingServer(delay=1.5) as server:
        embedder = _embedder(server, dimensions=32, timeout=0.3, max_retries=1)
        with pytest.raises(
            EndpointError, match=r"no answer within 0.3 s \(embedder.timeout\) after 2 attempt"
        ):
            embedder.embed(["slow"])
        queries = _embedder(server, queries=True, dimensions=32, timeout=30, query_timeout=0.2)
        with pytest.raises(EndpointError, match=r"0.2 s \(embedder.query_timeout\) after 2 attempt"):
            queries.embed(["slow query"])  # its own timeout, and at most one retry


def test_wrong_dimension_is_a_clear_error(server) -> None:
    server.answer_dim = 16
    with pytest.raises(
        EndpointError, match=r"returned 16-dimensional vectors, expected 32 \(embedder.dimensions\)"
    ):
        _embedder(server, dimensions=32).embed(["x"])
    learnt = _embedder(server)
    assert learnt.dim == 16  # learnt from the first answer when `dimensions` is not set
    server.answer_dim = 24
    with pytest.raises(EndpointError, match="returned 24-dimensional vectors, expected 16"):
        learnt.embed(["y"])


def test_model_mismatch_is_a_clear_error(server) -> None:
    server.answer_model = "another-model"
    with pytest.raises(
        EndpointError, match="answered with model 'another-model', but embedder.model is 'fake-embed'"
    ):
        _embedder(server, dimensions=32).embed(["x"])
    server.answer_model = "fake-embed:latest"  # Ollama's tag is the same model
    assert _embedder(server, dimensions=32).embed(["x"]).shape == (1, 32)


def test_the_key_comes_from_the_environment_and_is_never_shown(server, monkeypatch, caplog) -> None:
    secret = f"sk-test-{uuid.uuid4().hex}"
    with pytest.raises(EndpointConfigError, match="CHUNKYARD_TEST_EMBED_KEY is not set"):
        _embedder(server, api_key_env="CHUNKYARD_TEST_EMBED_KEY")
    monkeypatch.setenv("CHUNKYARD_TEST_EMBED_KEY", secret)
    embedder = _embedder(server, api_key_env="CHUNKYARD_TEST_EMBED_KEY", dimensions=32)
    caplog.set_level(logging.DEBUG)
    server.fail_next(429, retry_after="0")
    server.fail_next(401)
    with pytest.raises(EndpointError) as failed:
        embedder.embed(["secret?"])
    assert server.authorizations == [f"Bearer {secret}"] * 2
    assert "CHUNKYARD_TEST_EMBED_KEY" in str(failed.value)  # names the variable, not its value
    shown = [str(failed.value), repr(embedder), repr(embedder.settings), caplog.text]
    assert all(secret not in text for text in shown)


def test_options_are_checked_with_the_field_named() -> None:
    with pytest.raises(EndpointConfigError, match="embedder.url"):
        EndpointSettings.from_options({"backend": "openai", "model": "m"})
    with pytest.raises(EndpointConfigError, match="embedder.model"):
        EndpointSettings.from_options({"backend": "openai", "url": "http://127.0.0.1:1/v1"})
    with pytest.raises(EndpointConfigError, match="embedder.concurrency"):
        EndpointSettings.from_options(
            {"backend": "openai", "url": "http://127.0.0.1:1", "model": "m", "concurrency": 0}
        )
    with pytest.raises(EndpointConfigError, match="embedder.quantize: .*set `quantize: null`"):
        EndpointSettings.from_options(
            {"backend": "openai", "url": "http://x", "model": "m", "quantize": "int8"}
        )
    with pytest.raises(EndpointConfigError, match=r"unknown option\(s\) \['threads'\]"):
        EndpointSettings.from_options({"backend": "openai", "url": "http://x", "model": "m", "threads": 2})
    # the bundled defaults' local options, turned off, are accepted
    EndpointSettings.from_options(
        {
            "backend": "openai",
            "url": "http://x",
            "model": "m",
            "quantize": None,
            "batch_size": 32,
            "device": "cpu",
        }
    )


def test_config_load_checks_the_endpoint_and_its_model_shapes_the_config_hash(tmp_path, monkeypatch) -> None:
    from chunkyard.retrieval.settings.config import IndexConfig, load_index_configs
    from chunkyard.retrieval.settings.project import SettingsError

    bad = tmp_path / "indexes.yaml"
    bad.write_text(
        "indexes:\n  remote:\n    chunker: {strategy: token, size: 64}\n    embedder: {backend: openai, model: m}\n"
    )
    with pytest.raises(SettingsError, match=r"indexes.remote.embedder.url"):
        load_index_configs(bad)
    defaults = "defaults:\n  embedder: {backend: onnx, quantize: int8, batch_size: 32}\nindexes:\n  remote:\n"
    entry = "    chunker: {strategy: token, size: 64}\n    embedder: {backend: openai, url: 'http://127.0.0.1:1/v1', model: m"
    bad.write_text(defaults + entry + "}\n")  # the defaults' int8 does not apply to a server: dropped
    assert "quantize" not in load_index_configs(bad)["remote"].embedder
    bad.write_text(defaults + entry + ", quantize: int8}\n")
    with pytest.raises(SettingsError, match=r"indexes.remote.embedder.quantize"):
        load_index_configs(bad)  # written in the entry itself: refused
    bad.write_text(defaults + entry + ", quantize: null}\n")
    assert load_index_configs(bad)["remote"].embedder["model"] == "m"
    chunker = {"strategy": "token", "size": 64}
    local = IndexConfig("c", chunker)
    remote = IndexConfig(
        "c", chunker, embedder={"backend": "openai", "url": "http://127.0.0.1:1", "model": "m"}
    )
    moved = IndexConfig(
        "c", chunker, embedder={"backend": "openai", "url": "http://127.0.0.1:2", "model": "m"}
    )
    other = IndexConfig(
        "c", chunker, embedder={"backend": "openai", "url": "http://127.0.0.1:1", "model": "n"}
    )
    onnx = IndexConfig("c", chunker, embedder={"backend": "onnx"})
    assert local.config_hash == onnx.config_hash  # local backends: unchanged hashes
    assert remote.config_hash == moved.config_hash != local.config_hash != other.config_hash


def _spec(server: FakeEmbeddingServer, collection: str, **embedder: object):
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

    config = IndexConfig(
        name="endpoint-token-32",
        chunker={"strategy": "token", "size": 32, "overlap": 0, "tokenizer": "model"},
        bm25={"analyzer": "english"},
        embedder={"backend": "openai", "url": server.url, "model": server.model, "batch_size": 4, **embedder},
    )
    return IndexSpec(collection, config)


DOCS = [
    Document(f"d{i}.md", " ".join(f"topic{i} word{j} sentence{(i * j) % 11}" for j in range(60)))
    for i in range(4)
]


def test_a_build_records_usage_and_the_cache_keys_on_the_endpoints_model(store, server) -> None:
    from chunkyard.pipeline.step_report import StepRun
    from chunkyard.pipeline.steps.embeddings import step_embeddings
    from chunkyard.retrieval.embedders.embedder import embedder_for_config
    from chunkyard.retrieval.indexing.bm25 import stage_bm25
    from chunkyard.retrieval.indexing.chunks import stage_chunks
    from chunkyard.retrieval.indexing.publish import publish

    spec = _spec(server, f"ep{uuid.uuid4().hex[:8]}")
    embedder = embedder_for_config(spec.config)
    assert embedder.model_id == "openai:fake-embed"
    store.documents.sync(spec.collection, DOCS, [])
    stage_chunks(store, spec, embedding_model=embedder)
    step = step_embeddings(store, spec, embedder, StepRun())
    metadata = step.metadata
    assert all(check.passed for check in step.checks)
    distinct = metadata["embeddings_computed"]
    assert distinct > 8 and sum(server.answered.values()) == distinct  # every text sent once
    assert metadata["endpoint_texts"] == distinct and metadata["endpoint_requests"] == len(server.batch_sizes)
    assert metadata["endpoint_tokens"] > 0 and metadata["endpoint_retries"] == 0
    assert metadata["endpoint_seconds"] > 0
    stage_bm25(store, spec)
    publish(store, spec)
    with store.connection() as conn:
        cached = conn.execute(
            "SELECT count(*) FROM embedding_cache WHERE model_id = 'openai:fake-embed'"
        ).fetchone()[0]
    assert cached >= distinct

    again = _spec(server, f"ep{uuid.uuid4().hex[:8]}")
    store.documents.sync(again.collection, DOCS, [])
    requests = server.requests
    from chunkyard.pipeline.graph import build_index

    build_index(store, again, embedder)
    assert server.requests == requests  # every vector from the cache: the endpoint is not asked

    resized = _spec(server, f"ep{uuid.uuid4().hex[:8]}", dimensions=16)
    store.documents.sync(resized.collection, DOCS, [])
    sized = embedder_for_config(resized.config)
    assert sized.model_id == "openai:fake-embed@16d"
    build_index(store, resized, sized)  # another model id: embedded again, at 16 dimensions
    assert server.requests > requests
    with store.connection() as conn:
        dims = conn.execute(
            "SELECT DISTINCT vector_dims(embedding) FROM chunks WHERE index_name = %s", (str(resized.name),)
        ).fetchall()
    assert dims == [(16,)]


def test_the_service_reports_the_endpoint_in_readyz_and_503s_searches_without_it(store) -> None:
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.api.service import ENDPOINT_UNAVAILABLE, create_app
    from chunkyard.retrieval.embedders.embedder import embedder_for_config
    from chunkyard.retrieval.embedders.endpoint_backend import forget_shared_endpoint_embedders
    from chunkyard.retrieval.query import Searcher
    from fastapi.testclient import TestClient

    with FakeEmbeddingServer() as server:
        spec = _spec(server, f"svc{uuid.uuid4().hex[:8]}", max_retries=0)
        store.documents.sync(spec.collection, DOCS, [])
        build_index(store, spec, embedder_for_config(spec.config))
        forget_shared_endpoint_embedders()
        searcher = Searcher(store)
        query_embedder = searcher.embedder(str(spec.name), spec.config.as_dict())
        assert query_embedder.queries and query_embedder is not embedder_for_config(spec.config)
        http = TestClient(create_app(searcher))
        ready = http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["dependencies"] == {"database": "ok", "embedding_endpoint": "ok"}
        found = http.post(
            "/v1/search", json={"query": "topic1 word3", "index": str(spec.name), "mode": "dense"}
        )
        assert found.status_code == 200 and found.json()["results"]

        forget_shared_endpoint_embedders()  # a fresh readiness probe
        server.fail_next(503, times=10)
        down = http.get("/readyz")
        assert down.status_code == 200 and down.json()["status"] == "degraded"  # BM25 still serves
        assert down.json()["dependencies"]["embedding_endpoint"] == "unavailable"
        assert server.url not in down.text  # details go to the log only
        failed = http.post("/v1/search", json={"query": "topic2", "index": str(spec.name), "mode": "dense"})
        assert failed.status_code == 503 and failed.json() == {"detail": ENDPOINT_UNAVAILABLE}
        lexical = http.post("/v1/search", json={"query": "topic2", "index": str(spec.name), "mode": "bm25"})
        assert lexical.status_code == 200 and lexical.json()["results"]

        forget_shared_endpoint_embedders()  # a service started while the endpoint is down still warms
        server.fail_next(503, times=20)
        with TestClient(create_app(Searcher(store), warm=[str(spec.name)])) as warming:
            deadline = time.monotonic() + 60
            while (state := warming.get("/readyz").json())["status"] == "warming":
                assert time.monotonic() < deadline, "the service never finished warming"
                time.sleep(0.1)
            assert state["status"] == "degraded", state


def test_the_leaderboard_shows_endpoint_usage_columns_only_when_a_row_has_them() -> None:
    from chunkyard.evaluation.reports import Leaderboard, LeaderboardRow

    def row(config: str, cost: dict[str, float]) -> LeaderboardRow:
        return LeaderboardRow(config, f"c/{config}", "dense", "d", 5, 3, {}, cost=cost)

    local = Leaderboard([row("local", {"chunks": 10.0})], k=5)
    assert "endpoint_tokens" not in local.markdown()
    usage = {"chunks": 10.0, "endpoint_tokens": 1234.0, "endpoint_requests": 7.0, "endpoint_retries": 1.0}
    mixed = Leaderboard(
        [row("remote", {**usage, "endpoint_seconds": 2.25}), row("local", {"chunks": 10.0})], k=5
    )
    table = mixed.markdown()
    header = next(line for line in table.splitlines() if line.startswith("| config"))
    assert "endpoint_tokens | endpoint_requests | endpoint_retries | endpoint_seconds" in header
    assert "| 1,234 | 7 | 1 | 2.2 |" in table or "| 1,234 | 7 | 1 | 2.3 |" in table
    assert mixed.records()[0]["cost_endpoint_tokens"] == 1234.0


def test_the_dagster_assets_embed_on_the_server_and_report_its_usage(
    tmp_path, monkeypatch, store, pg_url
) -> None:
    from chunkyard.assets.definitions import build_definitions
    from dagster import instance_for_test, materialize

    from tests.dagster_helpers import INDEXES, materializations, unique_name, write_project

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    collection = unique_name("ep")
    # a model of its own: the session's embedding cache (keyed on the model id) must not already hold
    # these texts from another test's fake server, or nothing would be computed here
    with FakeEmbeddingServer(model=unique_name("fake-embed")) as server:
        remote = {"backend": "openai", "url": server.url, "model": server.model, "batch_size": 2}
        indexes = {
            "defaults": INDEXES["defaults"],  # backend torch, batch_size 32: the config's own win
            "indexes": {"token-48": {**INDEXES["indexes"]["token-48"], "embedder": remote}},
        }
        question = {
            "id": "q1",
            "question": "Which words does BM25 score highly?",
            "references": [{"doc": "alpha.md", "text": "BM25 scores rare words such as zyxomorphic highly."}],
        }
        _, indexes_path, collections_path = write_project(
            tmp_path, collection, indexes=indexes, eval_set=[question]
        )
        defs = build_definitions(indexes_path, collections_path, database_url=pg_url)
        with instance_for_test() as instance:
            result = materialize(list(defs.assets), instance=instance, resources=defs.resources)
        assert result.success
        embedded = materializations(result)[f"{collection}/token_48/embeddings"]
        assert embedded["model_id"] == f"openai:{server.model}"
        assert embedded["endpoint_requests"] >= embedded["embeddings_computed"] / 2  # batch_size 2
        assert embedded["endpoint_texts"] == embedded["embeddings_computed"] > 0
        assert max(server.batch_sizes) <= 2
        cost = store.evaluations.latest(f"{collection}/token-48")["cost"]  # the evaluation report's cost
        assert cost["endpoint_requests"] == embedded["endpoint_requests"]
        assert cost["endpoint_tokens"] == embedded["endpoint_tokens"] > 0
