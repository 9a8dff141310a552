"""Admission control: beyond the stated latency a search gets 503 with Retry-After at once, never a long queue."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.admission import Admission, AdmissionLimits
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.store import Store

from tests.service_process import serve_in_thread
from tests.test_indexing_support import ParagraphChunker, make_spec


@pytest.fixture(scope="module")
def searcher(pg_url: str, embedder) -> Searcher:
    store = Store(pg_url)
    store.migrate()
    return Searcher(store, embedder)


@pytest.fixture(scope="module")
def index_name(searcher: Searcher, embedder) -> str:
    spec = make_spec()
    docs = [Document("a.md", "Postgres recovers after a crash.\n\nThe queue depth is seven.")]
    searcher.store.documents.sync(spec.collection, docs, [])
    build_index(searcher.store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec.name


def test_an_overloaded_service_refuses_at_once_and_answers_what_it_admits(
    searcher: Searcher, index_name: str
) -> None:
    """One slot and a latency shorter than one search: while a search runs, the next is refused."""
    app = create_app(searcher, admission=AdmissionLimits(latency_s=0.001, slots=1))
    body = {"query": "what is the queue depth", "index": index_name, "mode": "hybrid"}
    with serve_in_thread(app) as base:
        first = httpx.post(f"{base}/v1/search", json=body, timeout=60)  # an idle server admits
        assert first.status_code == 200 and first.json()["results"]
        answers: list[httpx.Response] = []
        lock = threading.Lock()

        def search() -> None:
            response = httpx.post(f"{base}/v1/search", json=body, timeout=60)
            with lock:
                answers.append(response)

        threads = [threading.Thread(target=search) for _ in range(8)]
        for thread in threads:
            thread.start()
        health = httpx.get(f"{base}/healthz", timeout=60)  # never subject to admission
        for thread in threads:
            thread.join()
    assert health.status_code == 200
    codes = sorted(response.status_code for response in answers)
    assert set(codes) == {200, 503}, codes
    for response in answers:
        if response.status_code == 200:
            assert response.json()["results"]
        else:
            assert int(response.headers["retry-after"]) >= 1
            assert "at capacity" in response.json()["detail"]


def _held_app(release: asyncio.Event, entered: list[str]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        entered.append(scope["path"])
        if scope["path"] == "/v1/search":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def test_a_search_waits_for_a_slot_no_longer_than_the_latency_allows() -> None:
    async def scenario() -> tuple[list[int], list[str], str, Admission]:
        release = asyncio.Event()
        entered: list[str] = []
        admission = Admission(_held_app(release, entered), AdmissionLimits(latency_s=0.3, slots=1))
        transport = httpx.ASGITransport(app=admission)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            holder = asyncio.create_task(client.post("/v1/search"))
            while "/v1/search" not in entered:
                await asyncio.sleep(0.01)
            refused = await client.post("/v1/search")  # waits for the one slot, then gives up
            other = await client.get("/v1/indexes")  # other routes pass
            release.set()
            held = await holder
            after = await client.post("/v1/search")  # the slot is free again
        codes = [held.status_code, refused.status_code, other.status_code, after.status_code]
        return codes, entered, refused.headers.get("retry-after", ""), admission

    codes, entered, retry_after, admission = asyncio.run(scenario())
    assert codes == [200, 503, 200, 200]
    assert entered == ["/v1/search", "/v1/indexes", "/v1/search"]  # the refused search never started
    assert int(retry_after) >= 1
    assert (admission.admitted, admission.refused, admission.running, len(admission.waiting)) == (2, 1, 0, 0)


def test_waiting_searches_are_served_first_come_first_served() -> None:
    async def scenario() -> list[int]:
        release = asyncio.Event()
        entered: list[str] = []
        admission = Admission(_held_app(release, entered), AdmissionLimits(latency_s=30, slots=1))
        transport = httpx.ASGITransport(app=admission)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            tasks = [asyncio.create_task(client.post("/v1/search")) for _ in range(4)]
            while len(admission.waiting) < 3:
                await asyncio.sleep(0.01)
            release.set()
            answers = await asyncio.gather(*tasks)
        assert admission.running == 0 and not admission.waiting
        return [a.status_code for a in answers]

    assert asyncio.run(scenario()) == [200, 200, 200, 200]


def test_admission_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKYARD_SEARCH_LATENCY_S", "soon")
    with pytest.raises(ValueError, match="CHUNKYARD_SEARCH_LATENCY_S"):
        AdmissionLimits.from_env()
    monkeypatch.setenv("CHUNKYARD_SEARCH_LATENCY_S", "1.5")
    monkeypatch.setenv("CHUNKYARD_SEARCH_SLOTS", "3")
    assert AdmissionLimits.from_env() == AdmissionLimits(latency_s=1.5, slots=3)
