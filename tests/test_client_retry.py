"""`Client` honours `Retry-After`: a 429 (a key's rate) or 503 (the service's admission control) is retried
after the server's delay, a bounded number of times, up to a longest wait, and not at all with
`retries=0`. Against the real service (uvicorn in this process) on the real Postgres and model."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.admission import AdmissionLimits
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.integrations.client import Client, RateLimitedError, ServiceUnavailableError
from chunkyard.retrieval.query import Searcher

from tests.service_process import serve_in_thread
from tests.test_indexing_support import ParagraphChunker, make_spec

BOOTSTRAP = "retry-bootstrap-key"


@pytest.fixture(scope="module")
def searcher(store, embedder) -> Searcher:
    return Searcher(store, embedder)


@pytest.fixture(scope="module")
def index(searcher: Searcher, embedder) -> str:
    spec = make_spec()
    docs = [Document("a.md", "Lighthouses guide ships past the reef."), Document("b.md", "Queues hold work.")]
    searcher.store.documents.sync(spec.collection, docs, [])
    build_index(searcher.store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return str(spec.name)


def _retries(caplog: pytest.LogCaptureFixture, status: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "chunkyard.client" and f": {status}," in r.getMessage()
    ]


def test_a_rate_limited_key_waits_the_servers_delay_and_succeeds(
    searcher: Searcher, index: str, caplog: pytest.LogCaptureFixture
) -> None:
    collection = index.split("/")[0]

    def key() -> str:  # a fresh key (a full bucket) of 1 request/s
        name = f"retry-{uuid.uuid4().hex[:8]}"
        return searcher.store.keys.create(name, "search", [collection], actor="test", rate_per_s=1.0)[1]

    with serve_in_thread(create_app(searcher, api_key=BOOTSTRAP)) as url:
        with Client(url, api_key=key()) as client, caplog.at_level(logging.INFO, logger="chunkyard.client"):
            assert client.search("ships", index=index, k=1)[0].doc_id == "a.md"  # the burst: one request
            # the next one at once is over the rate: 429, Retry-After 1, waited, then answered
            assert client.search("ships", index=index, k=1)[0].doc_id == "a.md"
        waited = _retries(caplog, 429)
        assert waited and waited[0].startswith("POST /v1/search: 429, retrying in 1 s (retry 1 of 2)")

        # off switch: retries=0 raises at once, with the server's delay
        with Client(url, api_key=key(), retries=0) as client:
            client.indexes()
            with pytest.raises(RateLimitedError) as refused:
                client.indexes()
            assert refused.value.retry_after_s == 1
        # bounded: a delay over max_retry_wait_s is not waited for
        with Client(url, api_key=key(), max_retry_wait_s=0.5) as client:
            client.indexes()
            with pytest.raises(RateLimitedError):
                client.indexes()


def test_searches_refused_by_admission_control_are_retried_after_its_delay(
    searcher: Searcher, index: str, caplog: pytest.LogCaptureFixture
) -> None:
    # one search at a time and a 1 ms stated latency: a search that finds the slot taken gets 503
    app = create_app(searcher, api_key=BOOTSTRAP, admission=AdmissionLimits(latency_s=0.001, slots=1))
    results: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def one(client: Client) -> None:
        start.wait()
        try:
            results.append(client.search("ships", index=index, k=1)[0].doc_id)
        except Exception as exc:  # reported below, with the others
            errors.append(exc)

    with serve_in_thread(app) as url, caplog.at_level(logging.INFO, logger="chunkyard.client"):
        # each round admits at least one (an idle server always admits): 4 rounds at most
        clients = [Client(url, api_key=BOOTSTRAP, retries=4) for _ in range(4)]
        threads = [threading.Thread(target=one, args=(client,)) for client in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        for client in clients:
            client.close()
        assert errors == [] and results == ["a.md"] * 4
        assert _retries(caplog, 503), "no search was refused: the four did not overlap"

        # without retries the refusal comes back as it is, with the server's delay
        with (
            Client(url, api_key=BOOTSTRAP, retries=0) as first,
            Client(url, api_key=BOOTSTRAP, retries=0) as second,
        ):
            refusals: list[ServiceUnavailableError] = []
            gate = threading.Barrier(2)

            def bare(client: Client) -> None:
                gate.wait()
                for _ in range(5):
                    try:
                        client.search("ships", index=index, k=1)
                    except ServiceUnavailableError as exc:
                        refusals.append(exc)

            pair = [threading.Thread(target=bare, args=(c,)) for c in (first, second)]
            for thread in pair:
                thread.start()
            for thread in pair:
                thread.join(timeout=120)
        assert refusals and all(r.retry_after_s is not None and r.retry_after_s >= 1 for r in refusals)
        assert "HTTP 503" in str(refusals[0])


def test_bad_retry_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="retries: must be a whole number"):
        Client("http://127.0.0.1:9", retries=-1)
    with pytest.raises(ValueError, match="max_retry_wait_s: must be 0 or more"):
        Client("http://127.0.0.1:9", max_retry_wait_s=float("inf"))
