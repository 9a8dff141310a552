"""The MCP server's streamable HTTP transport takes the service's stored, scoped keys (issues 36 and 37):
a search key reads only its collections, a revoked key is refused, a key over its rate gets 429 with
`Retry-After`, and every call is logged under the key's name. Driven by the official `mcp` SDK's
client against a real index on the real Postgres."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import httpx
import pytest
from chunkyard.retrieval.api.auth import Caller
from chunkyard.retrieval.api.rate_limits import Limits, RateLimiter
from chunkyard.retrieval.query import Searcher

from tests.located_index import build_located
from tests.service_process import serve_in_thread

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'chunkyard[mcp]')")
httpx2 = pytest.importorskip("httpx2", reason="the mcp extra is not installed (pip install 'chunkyard[mcp]')")

BOOTSTRAP = "mcp-bootstrap-5e"
QUESTION = "How many consultas did the customer desk answer?"


@pytest.fixture(scope="module")
def index(store, embedder, tmp_path_factory) -> str:
    name, _ = build_located(store, embedder, tmp_path_factory.mktemp("located"))
    return name


@pytest.fixture(scope="module")
def keys(store, index: str) -> dict[str, str]:
    """Tokens of: a search key for the index's collection, one for another collection, a limited one."""
    collection = index.split("/")[0]
    tag = uuid.uuid4().hex[:6]
    made = {}
    for role, collections, rate in (
        ("own", [collection], None),
        ("other", ["elsewhere"], None),
        ("slow", [collection], 0.2),
    ):
        _, token = store.keys.create(
            f"mcp-{role}-{tag}", "search", collections, actor="test", rate_per_s=rate
        )
        made[role] = token
        made[f"{role}-name"] = f"mcp-{role}-{tag}"
    return made


@pytest.fixture(scope="module")
def mcp_url(store, embedder, index: str):
    from chunkyard.retrieval.integrations.mcp_server import create_server, http_app

    app = http_app(create_server(Searcher(store, embedder)), BOOTSTRAP, store=lambda: store)
    with serve_in_thread(app) as base:
        yield f"{base}/mcp"


def _calls(url: str, token: str, index: str) -> dict:
    """list_indexes, search and read_span with `token`, through the SDK's streamable HTTP client."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> dict:
        http = httpx2.AsyncClient(headers={"X-API-Key": token}, timeout=60)
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            listed = (await client.call_tool("list_indexes", {})).structured_content
            found = await client.call_tool("search", {"query": QUESTION, "index": index, "k": 3})
            span = await client.call_tool(
                "read_span", {"doc_id": "annual-report.pdf", "index": index, "start": 0, "end": 50}
            )
            return {"listed": listed, "found": found, "span": span}

    return asyncio.run(run())


def test_a_search_key_reads_its_own_collection(mcp_url: str, keys: dict, index: str, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="chunkyard.mcp"):
        result = _calls(mcp_url, keys["own"], index)
    assert index in [entry["index"] for entry in result["listed"]["indexes"]]
    assert not result["found"].is_error
    hit = result["found"].structured_content["hits"][0]
    assert "472 consultas" in hit["snippet"] and hit["page"] == 2
    assert not result["span"].is_error and result["span"].structured_content["doc_id"] == "annual-report.pdf"
    logged = caplog.text
    assert f"mcp search {index} by key {keys['own-name']!r}" in logged
    assert f"mcp read_span {index} by key {keys['own-name']!r}" in logged
    assert keys["own"] not in logged  # the name, never the token


def test_a_search_key_cannot_reach_another_collection(mcp_url: str, keys: dict, index: str, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="chunkyard.mcp"):
        result = _calls(mcp_url, keys["other"], index)
    assert index not in [entry["index"] for entry in result["listed"]["indexes"]]
    assert result["listed"]["indexes"] == []  # `elsewhere` has no index: nothing is listed
    name = keys["other-name"]
    for call in (result["found"], result["span"]):
        assert call.is_error and call.content[0].text.endswith(f": key {name!r} may not read {index!r}")
    # an index that does not exist is refused with the same words: existence is not told
    missing = f"{index.split('/')[0]}/no-such-config"
    other = _calls(mcp_url, keys["other"], missing)["found"]
    assert other.is_error and other.content[0].text.endswith(f": key {name!r} may not read {missing!r}")
    assert f"mcp search {index} by key {name!r}: refused" in caplog.text


def test_unknown_revoked_and_rate_limited_keys_are_refused_on_the_wire(
    mcp_url: str, keys: dict, store, index: str
) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream"}
    missing = httpx.post(mcp_url, json=ping, headers=headers)
    assert missing.status_code == 401 and "missing API key" in missing.json()["detail"]
    malformed = httpx.post(mcp_url, json=ping, headers={**headers, "X-API-Key": "nope"})
    assert malformed.status_code == 401 and "malformed API key" in malformed.json()["detail"]

    # 0.2 requests/s: the first request passes, the next one at once is over the rate
    first = httpx.post(mcp_url, json=ping, headers={**headers, "X-API-Key": keys["slow"]})
    assert first.status_code != 429
    over = httpx.post(mcp_url, json=ping, headers={**headers, "X-API-Key": keys["slow"]})
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
    assert "rate limit" in over.json()["detail"]

    # the bootstrap key still works, and a revoked key is refused within a second
    assert _calls(mcp_url, BOOTSTRAP, index)["found"].is_error is False
    store.keys.revoke(keys["own-name"], actor="test")
    time.sleep(1.0)
    revoked = httpx.post(mcp_url, json=ping, headers={**headers, "Authorization": f"Bearer {keys['own']}"})
    assert revoked.status_code == 401 and "was revoked" in revoked.json()["detail"]


def test_a_scope_that_does_not_allow_search_is_refused(store, index: str) -> None:
    from chunkyard.retrieval.integrations.mcp_keys import Permit, Refused

    permit = Permit(Caller("metrics-reader", "metrics", None, Limits()), RateLimiter())
    with pytest.raises(Refused, match="has scope 'metrics'; search needs search"):
        permit.check("search", index, store)
