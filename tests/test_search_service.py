"""The HTTP service and client: contract, same results as in-process, 4xx (never 500) for bad input."""

from __future__ import annotations

import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.integrations.client import AuthenticationError, Client
from chunkyard.retrieval.query import IndexNotFoundError, Searcher, SearchError
from chunkyard.retrieval.store import Store
from fastapi.testclient import TestClient

from tests.service_process import serve_in_thread
from tests.test_indexing_support import ParagraphChunker, make_spec

PARAGRAPHS = [
    "The feline rested upon the rug near the fireplace.",
    "XQ_frobnicate_77 returns the pending depth of the ingestion queue.",
    "Glaciers carve valleys as they slowly move downhill.",
    "Postgres uses write-ahead logging to recover after a crash.",
]


@pytest.fixture(scope="module")
def searcher(pg_url: str, embedder) -> Searcher:
    store = Store(pg_url)
    store.migrate()
    return Searcher(store, embedder)


@pytest.fixture(scope="module")
def index_name(searcher: Searcher, embedder) -> str:
    spec = make_spec(bm25={"analyzer": "english"})
    docs = [
        Document("a.md", "\n\n".join(PARAGRAPHS[:2]), metadata={"lang": "en"}),
        Document("b.md", "\n\n".join(PARAGRAPHS[2:])),
    ]
    searcher.store.documents.sync(spec.collection, docs, [])
    build_index(searcher.store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec.name


@pytest.fixture(scope="module")
def http(searcher: Searcher) -> TestClient:
    return TestClient(create_app(searcher, max_k=20, max_body_bytes=4096), raise_server_exceptions=False)


def test_search_contract(http: TestClient, index_name: str) -> None:
    response = http.post(
        "/v1/search", json={"query": "XQ_frobnicate_77", "index": index_name, "k": 2, "mode": "hybrid"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["index"] == index_name and body["mode"] == "hybrid" and body["took_ms"] > 0
    first = body["results"][0]
    assert set(first) >= {
        "chunk_id",
        "doc_id",
        "start",
        "end",
        "text",
        "metadata",
        "scores",
        "rank",
        "timings",
    }
    assert "XQ_frobnicate_77" in first["text"] and first["rank"] == 1 and "rrf" in first["scores"]
    filtered = http.post(
        "/v1/search", json={"query": "queue", "index": index_name, "k": 5, "filters": {"lang": "en"}}
    ).json()
    assert filtered["results"] and all(r["doc_id"] == "a.md" for r in filtered["results"])


def test_indexes_health_and_readiness(http: TestClient, index_name: str) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    listed = {i["name"]: i for i in http.get("/v1/indexes").json()}
    assert listed[index_name]["version"] == 1 and listed[index_name]["chunk_count"] == 4
    assert listed[index_name]["lag"]["documents_behind"] == 0  # retrieval.indexing.lag: nothing unindexed
    # the analyzers its documents and queries use, and (for `analyzer: auto`) the detected languages
    assert listed[index_name]["analyzers"] == ["english"] and listed[index_name]["languages"] == {}
    assert "/v1/search" in http.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"query": "", "index": "INDEX"}, 400, "query: must be a non-empty string"),
        ({"index": "x"}, 422, "query"),
        ({"query": "q", "k": 0}, 422, "k"),
        ({"query": "q", "k": "five"}, 422, "k"),
        ({"query": "q", "k": 50}, 422, "less than or equal to 20"),
        ({"query": "q", "k": "5"}, 422, "k"),
        ({"query": "q", "k": True}, 422, "k"),
        ({"query": "q", "collapse_duplicates": 0}, 422, "collapse_duplicates"),
        ({"query": "q", "include_parent": "yes"}, 422, "include_parent"),
        ({"query": "q", "mode": "fuzzy"}, 422, "mode"),
        ({"query": "q", "filters": ["a"]}, 422, "filters"),
        ({"query": "q", "mmr": 3}, 422, "mmr"),
        ({"query": "q", "unknown": 1}, 422, "unknown"),
        ({"query": "q", "rerank": "cross-encoder:/etc"}, 400, "rerank"),
        ({"query": "q", "index": "nowhere/none"}, 404, "does not exist"),
        ({"query": "   ", "index": "INDEX"}, 400, "query"),
        ({"query": "q" * 5000}, 413, "bytes"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_problem(
    http: TestClient, index_name: str, body, status, needle
) -> None:
    body = {k: (index_name if v == "INDEX" else v) for k, v in body.items()}
    body.setdefault("index", index_name)
    response = http.post("/v1/search", json=body)
    assert response.status_code == status, response.text
    assert needle in response.text


def test_an_empty_query_is_worded_alike_in_process_over_http_and_by_the_client(
    http: TestClient, searcher: Searcher, index_name: str
) -> None:
    with pytest.raises(SearchError) as in_process:
        searcher.search("", index_name)
    response = http.post("/v1/search", json={"query": "", "index": index_name})
    assert response.status_code == 400 and response.json()["detail"] == str(in_process.value)
    with (
        serve_in_thread(create_app(searcher)) as base,
        Client(base) as client,
        pytest.raises(SearchError) as remote,
    ):
        client.search("", index=index_name)
    assert str(remote.value) == str(in_process.value) == "query: must be a non-empty string"


def test_malformed_json_is_a_4xx(http: TestClient) -> None:
    response = http.post("/v1/search", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422


def test_api_key_is_required_when_configured(searcher: Searcher, index_name: str) -> None:
    http = TestClient(create_app(searcher, api_key="s3cret"))
    body = {"query": "glaciers", "index": index_name}
    assert http.post("/v1/search", json=body).status_code == 401
    assert http.post("/v1/search", json=body, headers={"X-API-Key": "wrong"}).status_code == 401
    assert http.post("/v1/search", json=body, headers={"X-API-Key": "s3cret"}).status_code == 200
    assert http.get("/v1/indexes", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert http.get("/healthz").status_code == 200  # probes stay open


@pytest.fixture(scope="module")
def server_url(searcher: Searcher):
    """The app under uvicorn on 127.0.0.1 (a real socket), for the HTTP client."""
    with serve_in_thread(create_app(searcher, api_key="k")) as url:
        yield url


def test_client_returns_the_same_results_as_in_process_search(
    server_url: str, searcher: Searcher, index_name: str
):
    with Client(server_url, api_key="k") as client:
        for mode in ("dense", "bm25", "hybrid", "hybrid_weighted"):
            remote = client.search("a cat on a carpet, queue depth", index=index_name, k=3, mode=mode)
            local = searcher.search("a cat on a carpet, queue depth", index_name, k=3, mode=mode)
            assert [(r.chunk_id, r.doc_id, r.start, r.end, r.text, r.rank) for r in remote] == [
                (r.chunk_id, r.doc_id, r.start, r.end, r.text, r.rank) for r in local
            ]
            for a, b in zip(remote, local, strict=True):
                assert a.scores == pytest.approx(b.scores)
        assert index_name in [i["name"] for i in client.indexes()]
        with pytest.raises(IndexNotFoundError):
            client.search("q", index="nowhere/none")
        with pytest.raises(SearchError, match="mode"):
            client.search("q", index=index_name, mode="fuzzy")
        with pytest.raises(
            SearchError, match="has no `coarse` index config"
        ):  # the option reaches the Searcher
            client.search("q", index=index_name, coarse_min_gap=0.2)
    with Client(server_url) as anonymous, pytest.raises(AuthenticationError):
        anonymous.search("q", index=index_name)


def _example(spec) -> object:
    """A valid non-default value for one option, from its declared kind and bounds."""
    if spec.kind == "bool":
        return not spec.default
    if spec.kind == "choice":
        return next(c for c in spec.choices if c != spec.default)
    if spec.kind == "object":
        return {"lang": "en"}
    if spec.kind == "reranker":
        return "maxsim"
    if spec.kind == "name":
        return "o200k_base"
    value = spec.request_bound if spec.kind == "int" else (spec.ge + spec.request_bound) / 2
    return int(value) if spec.kind == "int" else float(value)


def test_service_client_and_cli_take_exactly_the_search_options() -> None:
    """One declaration (SearchOptions) and three derived surfaces: their option sets are equal."""
    import argparse
    import dataclasses
    import json

    import httpx
    from chunkyard.orchestration.cli import build_parser
    from chunkyard.retrieval.api.service import SearchBody
    from chunkyard.retrieval.settings.options import SearchOptions, option_schemas

    fields = {f.name for f in dataclasses.fields(SearchOptions)}
    assert {spec.name for spec in option_schemas()} == fields

    assert set(SearchBody.model_fields) - {"query", "index"} == fields

    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"results": []})

    examples = {spec.name: _example(spec) for spec in option_schemas()}
    with Client("http://test", transport=httpx.MockTransport(handler)) as client:
        client.search("q", index="demo/x", **examples)
    assert set(sent[0]) - {"query", "index"} == fields
    assert SearchBody(**sent[0]).model_dump(exclude={"query", "index"}) == examples

    search_parser = next(
        action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)
    ).choices["search"]
    flags = {action.dest for action in search_parser._actions} - {"help", "query", "index"}
    assert fields <= flags  # the CLI's own flags (--project, --debug, ...) are not search options
    argv = []
    for spec in option_schemas():
        flag = "--" + spec.name.replace("_", "-")
        if spec.kind == "bool":
            argv.append(flag if examples[spec.name] else "--no-" + flag[2:])
        else:
            argv += [
                flag,
                json.dumps(examples[spec.name]) if spec.kind == "object" else str(examples[spec.name]),
            ]
    parsed = search_parser.parse_args(["q", *argv])
    assert SearchOptions.from_arguments(parsed) == SearchOptions(**examples)


def test_search_options_validate_and_name_the_field() -> None:
    from chunkyard.retrieval.settings.options import MODES, SearchOptions, default_of

    # unset is explicit: nothing is filled in until the index's and the built-in defaults are
    assert SearchOptions().k is None and SearchOptions().given() == {}
    assert default_of("k") == 5 and default_of("mode") in MODES
    assert SearchOptions(k=5) != SearchOptions() and SearchOptions(k=5).given() == {"k": 5}
    assert SearchOptions(k=3).over(SearchOptions(k=2, mode="bm25")) == SearchOptions(k=3, mode="bm25")
    assert SearchOptions.of(SearchOptions(k=3), {"mode": "dense"}) == SearchOptions(k=3, mode="dense")
    for bad, field in (
        ({"k": 0}, "k"),
        ({"k": True}, "k"),
        ({"mode": "fuzzy"}, "mode"),
        ({"weight": 1.5}, "weight"),
        ({"filters": ["x"]}, "filters"),
        ({"include_parent": "yes"}, "include_parent"),
        ({"context_neighbours": 2.5}, "context_neighbours"),
    ):
        with pytest.raises(SearchError, match=f"^{field}:"):
            SearchOptions(**bad)
    with pytest.raises(SearchError, match="^colour: not a search option"):
        SearchOptions.of(None, {"colour": "red"})
    with pytest.raises(SearchError, match="^options: expected SearchOptions"):
        SearchOptions.of(5)  # type: ignore[arg-type]
