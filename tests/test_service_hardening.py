"""The service under hostile requests, on a real socket: body cap while streaming, 4xx for any input, contract."""

from __future__ import annotations

import json
import select
import socket
from typing import Any

import httpx
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.service import UNAVAILABLE, create_app
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.options import REQUEST_MAX_K
from chunkyard.retrieval.store import Store

from tests.service_process import rss_kib, serve_in_thread, service
from tests.test_indexing_support import ParagraphChunker, make_spec

DEAD_URL = "postgresql://postgres@/postgres?host=/nonexistent-chunkyard-socket-dir"


@pytest.fixture(scope="module")
def searcher(pg_url: str, embedder) -> Searcher:
    store = Store(pg_url)
    store.migrate()
    return Searcher(store, embedder)


@pytest.fixture(scope="module")
def index_name(searcher: Searcher, embedder) -> str:
    spec = make_spec(bm25={"analyzer": "english"})
    docs = [
        Document(
            "a.md", "Postgres recovers after a crash.\n\nThe queue depth is seven.", metadata={"lang": "en"}
        ),
        Document("b.md", "Glaciers carve valleys.\n\nCats sleep on rugs."),
    ]
    searcher.store.documents.sync(spec.collection, docs, [])
    build_index(searcher.store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec.name


@pytest.fixture(scope="module")
def base_url(searcher: Searcher) -> Any:
    """The app under uvicorn on a real loopback socket."""
    with serve_in_thread(create_app(searcher, max_body_bytes=8192)) as url:
        yield url


def _post_raw(base_url: str, raw: bytes, content_type: str | None = "application/json") -> httpx.Response:
    headers = {"content-type": content_type} if content_type else {}
    return httpx.post(f"{base_url}/v1/search", content=raw, headers=headers, timeout=30)


def test_a_chunked_body_over_the_cap_is_refused_while_streaming_before_auth() -> None:
    """#9: 256 MB chunked, no API key: 413 after the cap, the server stops reading, RSS stays flat."""
    with service("--database-url", DEAD_URL, "--cold", "--api-key", "s3cret", wait_status=503) as (
        base,
        proc,
    ):
        port = int(base.rsplit(":", 1)[1])
        before = rss_kib(proc.pid)
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        piece = b"[" + b" " * (64 * 1024 - 1)
        chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        sent, peak = 0, before
        response = b""
        try:
            while sent < 256 * 1024 * 1024:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable:
                    data = sock.recv(65536)
                    if not data:
                        break
                    response += data
                sock.sendall(chunk)
                sent += len(piece)
                if sent % (8 * 1024 * 1024) == 0:
                    peak = max(peak, rss_kib(proc.pid))
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            sock.settimeout(5)
            while b"\r\n\r\n" not in response and (data := sock.recv(65536)):
                response += data
        except OSError:
            pass
        sock.close()
        peak = max(peak, rss_kib(proc.pid))
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert sent < 64 * 1024 * 1024, f"the server kept reading: {sent} bytes accepted"
    assert peak - before < 32 * 1024, f"RSS grew by {(peak - before) // 1024} MiB"


def test_declared_oversize_is_a_413_and_the_probe_stays_open(base_url: str) -> None:
    response = httpx.post(f"{base_url}/v1/search", content=b"{" + b" " * 9000 + b"}", timeout=10)
    assert response.status_code == 413 and "8192" in response.json()["detail"]
    assert httpx.get(f"{base_url}/healthz").status_code == 200


HOSTILE = [
    '{"query": "q", "index": "INDEX", "filters": {"a\\u0000b": "x"}}',
    '{"query": "q", "index": "INDEX", "filters": {"lang": "e\\u0000n"}}',
    '{"query": "q", "index": "demo/rec\\u0000ursive"}',
    '{"query": "cats\\u0000", "index": "INDEX"}',
    '{"query": "\\ud800", "index": "INDEX"}',
    '{"query": "q", "index": "\\udfff/x"}',
    '{"query": "q", "index": "INDEX", "filters": {"\\ud800": 1}}',
    '{"query": "q", "index": "INDEX", "\\ud800": 1}',
    '{"query": "q", "index": "INDEX", "mode": "\\ud800"}',
    '{"query": "q", "index": "INDEX", "mmr": NaN}',
    '{"query": "q", "index": "INDEX", "weight": Infinity}',
    '{"query": "q", "index": "INDEX", "context_weight": -Infinity}',
    '{"query": "q", "index": "INDEX", "coarse_min_gap": 1e999999}',
    '{"query": "q", "index": "INDEX", "filters": {"x": NaN}}',
    '{"query": "q", "index": "INDEX", "k": 1e999999}',
    '{"query": "q", "index": "INDEX", "k": 100000000000000000000000000000}',
    '{"query": "q", "index": "INDEX", "filters": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"query": "q", "index": "INDEX", "filters": ' + '{"a":' * 40 + "1" + "}" * 40 + "}",
    '{"query": "q", "index": "a/b/c"}',
    '{"query": "q", "index": "INDEX", "rerank": "\\u0000"}',
    "[1, 2]",
    '"\\ud800"',
    "NaN",
]


@pytest.mark.parametrize("raw", HOSTILE)
def test_caller_input_is_a_4xx_never_a_500(base_url: str, index_name: str, raw: str) -> None:
    """#10: NUL (psycopg), lone surrogates (the 422 encoder), NaN/Infinity/1e999999 (the 422 serialiser)."""
    response = _post_raw(base_url, raw.replace("INDEX", index_name).encode())
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    body = response.json()
    assert "detail" in body


def test_the_422_names_the_field(base_url: str, index_name: str) -> None:
    response = _post_raw(base_url, f'{{"query": "q", "index": "{index_name}", "mmr": NaN}}'.encode())
    assert response.status_code == 422 and response.json()["message"].startswith("mmr:")
    response = _post_raw(base_url, b'{"query": "q", "filters": {"a\\u0000": 1}}')
    assert response.status_code == 422 and "NUL" in response.json()["message"]
    response = _post_raw(base_url, f'{{"query": "q", "index": "{index_name}", "k": 101}}'.encode())
    assert response.status_code == 422 and str(REQUEST_MAX_K) in response.text


def test_a_json_body_without_content_type_is_read_as_json(base_url: str, index_name: str) -> None:
    """curl -d sends no JSON type (form-urlencoded): the body is still JSON; any other type says why not."""
    raw = json.dumps({"query": "queue depth", "index": index_name, "k": 1}).encode()
    for content_type in (None, "application/x-www-form-urlencoded"):
        response = _post_raw(base_url, raw, content_type)
        assert response.status_code == 200, (content_type, response.text)
        assert response.json()["results"][0]["doc_id"] == "a.md"
    refused = _post_raw(base_url, raw, "text/plain")
    assert refused.status_code == 415 and "application/json" in refused.json()["detail"]


def test_openapi_declares_errors_security_and_the_k_limit(base_url: str) -> None:
    """#13: 400/401/413/503 documented, the key as a security scheme, k's one limit; strict types."""
    spec = httpx.get(f"{base_url}/openapi.json").json()
    operation = spec["paths"]["/v1/search"]["post"]
    assert {"200", "400", "401", "413", "422", "503"} <= set(operation["responses"])
    schemes = spec["components"]["securitySchemes"]
    assert any(s["type"] == "apiKey" and s["name"] == "X-API-Key" for s in schemes.values())
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    assert operation["security"]
    assert "SearchRequest" not in spec["components"]["schemas"]  # the body is not the library's value
    request = spec["components"]["schemas"]["SearchBody"]["properties"]
    assert request["k"]["maximum"] == REQUEST_MAX_K


def test_the_cli_shows_and_enforces_the_same_k_limit(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from chunkyard.orchestration.cli import build_parser

    search = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "search"
    ]
    assert f"(1-{REQUEST_MAX_K})" in search.format_help().replace("\n", " ").replace("  ", " ")
    with pytest.raises(SystemExit):
        search.parse_args(["q", "-k", str(REQUEST_MAX_K + 1)])
    assert f"between 1 and {REQUEST_MAX_K}" in capsys.readouterr().err


class _Report:
    """A stored evaluation report's shape (`EvaluationReport.as_dict()`), small."""

    dataset = "demo"

    def as_dict(self) -> dict[str, Any]:
        estimate = {"mean": 0.8947368421052632, "ci_low": 0.7, "ci_high": 0.95, "n": 19}
        overall = {
            name: estimate for name in ("hit_at_5", "mrr_at_5", "chroma_iou_at_5", "budget_recall_1024")
        }
        return {"format": 2, "k": 5, "summaries": {"hybrid": {"n_questions": 19, "overall": overall}}}


def test_indexes_list_headline_metrics_by_default_and_everything_on_request(
    base_url: str, searcher: Searcher, index_name: str
) -> None:
    searcher.store.evaluations.record(index_name, _Report())
    listed = {i["name"]: i for i in httpx.get(f"{base_url}/v1/indexes").json()}
    evaluation = listed[index_name]["latest_evaluation"]
    assert evaluation["headline"] == {"hybrid/hit_at_5": 0.8947, "hybrid/mrr_at_5": 0.8947}
    assert "report" not in evaluation and "config" not in listed[index_name]
    full = {i["name"]: i for i in httpx.get(f"{base_url}/v1/indexes", params={"full": "true"}).json()}
    assert (
        "chroma_iou_at_5" in full[index_name]["latest_evaluation"]["report"]["summaries"]["hybrid"]["overall"]
    )


def test_an_unreachable_database_is_a_generic_503_and_readyz_discloses_nothing() -> None:
    """#12: no bare 500, no socket path for an anonymous caller."""
    with service("--database-url", DEAD_URL, "--cold", wait_status=503) as (base, _):
        search = httpx.post(f"{base}/v1/search", json={"query": "q", "index": "demo/x"}, timeout=30)
        ready = httpx.get(f"{base}/readyz")
        indexes = httpx.get(f"{base}/v1/indexes")
    assert search.status_code == 503 and search.json() == {"detail": UNAVAILABLE}
    assert search.headers["retry-after"]
    assert ready.status_code == 503 and indexes.status_code == 503
    for response in (search, ready, indexes):
        assert "nonexistent" not in response.text and "socket" not in response.text
