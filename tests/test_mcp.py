"""The MCP server (issue 36): `chunkyard mcp` over stdio and streamable HTTP behind the API key, driven by
the official `mcp` SDK's own client, on a real index (the located PDFs and decks)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from chunkyard.retrieval.query import Searcher

from tests.located_index import build_located
from tests.service_process import serve_in_thread

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'chunkyard[mcp]')")

KEY = "mcp-key-36"
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def index(store, embedder, tmp_path_factory) -> str:
    name, _ = build_located(store, embedder, tmp_path_factory.mktemp("located"))
    return name


async def _session(client, index: str) -> dict:
    """The three tools called the way an agent would: list, search, then widen a hit."""
    tools = {tool.name for tool in (await client.list_tools()).tools}
    listed = (await client.call_tool("list_indexes", {})).structured_content
    found = await client.call_tool(
        "search", {"query": "How many consultas did the customer desk answer?", "index": index, "k": 3}
    )
    hit = found.structured_content["hits"][0]
    span = await client.call_tool(
        "read_span",
        {
            "doc_id": hit["doc_id"],
            "index": index,
            "start": hit["highlights"][0]["start"],
            "end": hit["highlights"][0]["end"],
            "widen": 40,
        },
    )
    question = "How many consultas did the customer desk answer?"
    budget = {"query": question, "index": index, "k": 3, "max_context_tokens": 40}
    fitted = (await client.call_tool("search", budget)).structured_content
    cut = [
        (
            await client.call_tool(
                "read_span",
                {"doc_id": hit["doc_id"], "index": index, "start": hit["start"], "end": hit["end"]},
            )
        ).structured_content["text"]
        for hit in fitted["hits"]
    ]
    bad = await client.call_tool("search", {"query": "x", "index": index, "k": 1000})
    bad_budget = await client.call_tool("search", {"query": "x", "index": index, "max_context_tokens": 0})
    bad_encoding = await client.call_tool("search", {**budget, "llm_tokenizer": "gpt-9"})
    missing = await client.call_tool("read_span", {"doc_id": "nope.pdf", "index": index})
    return {
        "tools": tools,
        "listed": listed,
        "found": found.structured_content,
        "span": span.structured_content,
        "fitted": fitted,
        "cut": cut,
        "bad": bad,
        "bad_budget": bad_budget,
        "bad_encoding": bad_encoding,
        "missing": missing,
    }


def _check(result: dict, index: str) -> None:
    assert result["tools"] >= {"search", "list_indexes", "read_span"}
    entry = next(i for i in result["listed"]["indexes"] if i["index"] == index)
    assert entry["documents"] == 5 and entry["freshness"]["documents_behind"] == 0
    assert entry["freshness"]["published_at"] and "languages" in entry
    assert isinstance(result["listed"]["aliases"], list)
    hit = result["found"]["hits"][0]
    assert hit["citation"].startswith("annual-report.pdf [") and hit["citation"].endswith(", page 2")
    assert "472 consultas" in hit["snippet"] and hit["page"] == 2 and hit["pages"] == [1, 4]
    assert result["found"]["index"] == index and result["found"]["k"] == 3
    span = result["span"]
    assert "472 consultas" in span["text"] and span["page"] == 2 and span["doc_id"] == "annual-report.pdf"
    fitted = result["fitted"]  # a token budget: the texts fit it together, each an exact document span
    assert fitted["hits"] and 0 < fitted["context_tokens"] <= 40
    assert fitted["context_tokens"] == sum(hit["scores"]["llm_tokens"] for hit in fitted["hits"])
    assert [hit["text"] for hit in fitted["hits"]] == result["cut"]
    assert any(hit["scores"].get("trimmed") for hit in fitted["hits"])  # 3 whole chunks are over 40
    assert "context_tokens" not in result["found"]
    assert result["bad"].is_error and "k: must be between 1 and 100" in result["bad"].content[0].text
    bad_budget = result["bad_budget"]
    assert bad_budget.is_error and "max_context_tokens" in bad_budget.content[0].text
    bad_encoding = result["bad_encoding"]
    assert bad_encoding.is_error and "llm_tokenizer" in bad_encoding.content[0].text
    assert result["missing"].is_error and "no document 'nope.pdf'" in result["missing"].content[0].text


def test_stdio_server_is_chunkyard_mcp(index: str, pg_url: str, tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters

    (tmp_path / "chunkyard.yaml").write_text("benchmarks: false\n")
    env = {**os.environ, "DATABASE_URL": pg_url}
    env.pop("CHUNKYARD_API_KEY", None)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "chunkyard.orchestration.cli", "mcp", "--project", str(tmp_path)],
        env=env,
        cwd=str(tmp_path),
    )

    async def run() -> dict:
        async with Client(server, read_timeout_seconds=120) as client:
            return await _session(client, index)

    _check(asyncio.run(run()), index)


def test_streamable_http_wants_the_api_key(index: str, store, embedder) -> None:
    import httpx
    import httpx2
    from chunkyard.retrieval.integrations.mcp_server import create_server, http_app
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    app = http_app(create_server(Searcher(store, embedder)), KEY, store=lambda: store)
    with serve_in_thread(app) as base:
        url = f"{base}/mcp"
        refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401 and "API key" in refused.json()["detail"]
        wrong = httpx.post(url, json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401

        async def run() -> dict:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                return await _session(client, index)

        _check(asyncio.run(run()), index)


def test_the_documented_client_configuration_is_valid_json() -> None:
    text = (REPO_ROOT / "docs" / "integrations.md").read_text()
    block = text.split("```json\n", 1)[1].split("```", 1)[0]
    servers = json.loads(block)["mcpServers"]
    assert servers["chunkyard"]["command"] == "chunkyard" and servers["chunkyard"]["args"][0] == "mcp"
