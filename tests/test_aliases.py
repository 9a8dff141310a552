"""Serving aliases on real Postgres: set/show/rollback, retention, request defaults, atomic swaps."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher, aliases
from chunkyard.retrieval.query.aliases import AliasError
from chunkyard.retrieval.settings.options import SearchOptions

from tests.test_indexing_support import ParagraphChunker, make_spec
from tests.test_search import TOPICS


@pytest.fixture(scope="module")
def two_indexes(store, embedder):
    """Two published indexes of one collection: paragraph chunks, and the same with another BM25 analyzer."""
    collection = f"c{uuid.uuid4().hex[:10]}"
    docs = [Document(f"doc{i}", "\n\n".join(TOPICS[i * 4 : i * 4 + 4])) for i in range(3)]
    specs = [
        make_spec(collection, "para-a"),
        make_spec(collection, "para-b", bm25={"k1": 1.2, "b": 0.5, "epsilon": 0.25, "analyzer": "english"}),
    ]
    store.documents.sync(collection, docs, [])
    for spec in specs:
        build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return specs


@pytest.fixture(scope="module")
def searcher(store, embedder) -> Searcher:
    return Searcher(store, embedder)


def _name() -> str:
    return f"alias-{uuid.uuid4().hex[:8]}"


def test_set_show_and_rollback_walk_the_chain(store, two_indexes) -> None:
    a, b = two_indexes
    name = _name()
    first = aliases.set_alias(store, name, a.name, {"mode": "bm25"}, note="first")
    assert (first.index, first.options, first.pinned_version, first.drifted) == (
        a.name,
        SearchOptions(mode="bm25"),
        1,
        False,
    )
    second = aliases.set_alias(store, name, b.name, {"mode": "hybrid_weighted", "weight": 0.3})
    assert second.previous == first.generation
    assert aliases.get_alias(store, name).options == SearchOptions(mode="hybrid_weighted", weight=0.3)
    back = aliases.rollback(store, name)
    assert (back.generation, back.index) == (first.generation, a.name)
    # a set after a rollback returns, on rollback, to the target it replaced (not the rolled-back one)
    third = aliases.set_alias(store, name, b.name, {"mode": "dense"})
    assert third.previous == first.generation
    assert aliases.rollback(store, name).generation == first.generation
    with pytest.raises(AliasError, match="no earlier target"):
        aliases.rollback(store, name)
    assert [t.generation for t in aliases.history(store, name)][0] == third.generation
    assert name in [t.alias for t in aliases.list_aliases(store)]


def test_retention_keeps_n_earlier_targets_and_drops_the_rest(store, two_indexes) -> None:
    a, b = two_indexes
    name = _name()
    for i in range(6):
        aliases.set_alias(store, name, (a, b)[i % 2].name, {"mode": "bm25", "k": 3 + i}, keep=2)
    kept = aliases.history(store, name)
    assert [t.options.k for t in kept] == [8, 7, 6]  # the current one and two before it
    aliases.rollback(store, name)
    aliases.rollback(store, name)
    with pytest.raises(AliasError, match="dropped"):
        aliases.rollback(store, name)


def test_invalid_alias_requests_name_the_field(store, two_indexes) -> None:
    a, _ = two_indexes
    with pytest.raises(AliasError, match="alias:"):
        aliases.set_alias(store, "Bad/Name", a.name)
    with pytest.raises(AliasError, match="index:"):
        aliases.set_alias(store, _name(), f"{a.collection}/missing")
    with pytest.raises(AliasError, match="options:"):
        aliases.set_alias(store, _name(), a.name, {"mode": "fuzzy"})
    with pytest.raises(AliasError, match="alias:"):
        aliases.rollback(store, _name())


def test_search_through_an_alias_uses_its_target_and_options_as_defaults(
    store, two_indexes, searcher
) -> None:
    a, b = two_indexes
    name = _name()
    aliases.set_alias(store, name, b.name, {"mode": "bm25", "k": 2})
    query = "volcano magma eruption"
    got = searcher.search(query, name)
    assert [r.chunk_id for r in got] == [r.chunk_id for r in searcher.search(query, b.name, k=2, mode="bm25")]
    assert {r.index for r in got} == {b.name}
    # request values win over the alias's
    dense = searcher.search(query, name, mode="dense", k=3)
    assert [r.chunk_id for r in dense] == [
        r.chunk_id for r in searcher.search(query, b.name, k=3, mode="dense")
    ]
    # an explicit k=5 is a request value too (not mistaken for the default): it wins over the alias's 2
    five, plan = searcher.search_with_plan(query, name, SearchOptions(k=5))
    assert (plan.k, plan.mode) == (5, "bm25")
    assert [r.chunk_id for r in five] == [
        r.chunk_id for r in searcher.search(query, b.name, k=5, mode="bm25")
    ]
    assert searcher.search_with_plan(query, name)[1].k == 2
    # the library entry point takes the alias too
    batch = searcher.search_batch([query, "sourdough flour and water"], name)
    assert [len(rows) for rows in batch] == [len(got), 2] and {r.index for rows in batch for r in rows} == {
        b.name
    }, batch


def test_alias_swap_is_atomic_for_readers(store, two_indexes, searcher) -> None:
    """Readers in threads query the alias while it is swapped back and forth (set and rollback):
    no errors, and every answer is exactly one target's answer (index, version and options together)."""
    a, b = two_indexes
    name = _name()
    targets = {a.name: {"mode": "bm25", "k": 4}, b.name: {"mode": "dense", "k": 3}}
    queries = [
        "postgres write-ahead logging crash",
        "the feline rested on the rug",
        "stock market interest rates",
    ]
    expected = {
        (index, q): [(r.index, r.index_version, r.chunk_id) for r in searcher.search(q, index, **options)]
        for index, options in targets.items()
        for q in queries
    }
    assert all(expected.values())
    aliases.set_alias(store, name, a.name, targets[a.name])
    errors: list[BaseException] = []
    mixed: list[tuple] = []
    seen: set[str] = set()
    answered = [0]
    stop = threading.Event()
    lock = threading.Lock()

    def reader(offset: int) -> None:
        i = offset
        while not stop.is_set():
            q = queries[i % len(queries)]
            i += 1
            try:
                got = [(r.index, r.index_version, r.chunk_id) for r in searcher.search(q, name)]
            except BaseException as exc:  # noqa: BLE001 - every failure counts
                errors.append(exc)
                continue
            indexes = {row[0] for row in got}
            with lock:
                answered[0] += 1
                if len(indexes) != 1 or got != expected[(indexes.pop(), q)]:
                    mixed.append((q, got))
                else:
                    seen.add(got[0][0])

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        for i in range(30):
            if i % 3 == 2:
                aliases.rollback(store, name)
            else:
                index = (b, a)[i % 2].name
                aliases.set_alias(store, name, index, targets[index])
            time.sleep(0.03)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert errors == []
    assert mixed == []
    assert answered[0] > 30 and seen == {a.name, b.name}


def test_cli_alias_set_show_rollback_and_search(
    store, two_indexes, pg_url, tmp_path, monkeypatch, capsys
) -> None:
    from chunkyard.orchestration.cli import main

    a, b = two_indexes
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CHUNKYARD_PROJECT", "")
    assert main(["init", str(tmp_path / "p")]) == 0
    project = ["--project", str(tmp_path / "p")]
    name = _name()
    assert main([*project, "alias", "set", name, a.name, "--mode", "bm25", "-k", "2", "--note", "first"]) == 0
    assert main([*project, "alias", "set", name, b.name, "--mode", "hybrid_weighted", "--weight", "0.3"]) == 0
    capsys.readouterr()
    assert main([*project, "alias", "show", name]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith(f"* {name} -> {b.name}@v1 mode=hybrid_weighted weight=0.3")
    assert shown[1].startswith(f"{name} -> {a.name}@v1 k=2 mode=bm25") and shown[1].endswith("# first")
    assert main([*project, "alias", "rollback", name]) == 0
    assert capsys.readouterr().out.startswith(f"{name} -> {a.name}@v1")
    assert main([*project, "search", "the feline rested on the rug", "--index", name, "--no-service"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: 2 results") and "1. doc0 " in out and "ranks: bm25 1" in out
    assert main([*project, "alias", "rollback", name]) == 2  # nothing earlier: a usage error, one line
    assert main([*project, "alias", "set", name, f"{a.collection}/missing"]) == 2


@pytest.fixture
def service_url(searcher):
    """The app (API key `s3cret`) under uvicorn on a loopback socket."""
    from chunkyard.retrieval.api.service import create_app

    from tests.service_process import serve_in_thread

    with serve_in_thread(create_app(searcher, api_key="s3cret")) as url:
        yield url


def test_the_api_and_client_pin_show_roll_back_and_search_an_alias(
    two_indexes, searcher, service_url
) -> None:
    import httpx
    from chunkyard.retrieval.integrations.client import AuthenticationError, Client
    from chunkyard.retrieval.query.results import SearchError

    a, b = two_indexes
    name = _name()
    http = httpx.Client(base_url=service_url, timeout=30)
    assert http.get("/v1/aliases").status_code == 401
    assert http.put(f"/v1/aliases/{name}", json={"index": a.name}).status_code == 401
    client = Client(service_url, api_key="s3cret")
    with pytest.raises(AuthenticationError):
        Client(service_url).aliases()
    pinned = client.set_alias(name, a.name, {"mode": "bm25", "k": 2}, note="api")
    assert (pinned["index"], pinned["options"], pinned["note"]) == (a.name, {"mode": "bm25", "k": 2}, "api")
    # The response reports what ran: the alias's pinned mode and k, not the request's defaults.
    answered = http.post(
        "/v1/search", json={"query": "feline", "index": name}, headers={"X-API-Key": "s3cret"}
    )
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert (body["mode"], body["k"], body["index"]) == ("bm25", 2, a.name) and len(body["results"]) <= 2
    client.set_alias(name, b.name, {"mode": "dense"})
    assert name in {entry["alias"] for entry in client.aliases()}
    shown = http.get(f"/v1/aliases/{name}", headers={"X-API-Key": "s3cret"}).json()
    assert shown["index"] == b.name and [t["index"] for t in shown["history"]] == [b.name, a.name]
    query = "the feline rested on the rug"
    through_client = client.search(query, index=name, k=3)
    assert [r.chunk_id for r in through_client] == [
        r.chunk_id for r in searcher.search(query, b.name, k=3, mode="dense")
    ]
    assert client.rollback_alias(name)["index"] == a.name
    assert {r.index for r in client.search(query, index=name)} == {a.name}
    with pytest.raises(SearchError, match="has no earlier target"):  # the service's own words, as in-process
        client.rollback_alias(name)
    with pytest.raises(SearchError, match="options.k"):
        client.set_alias(name, a.name, {"k": 500})
    with pytest.raises(SearchError, match="options.rerank"):
        client.set_alias(name, a.name, {"rerank": "cross-encoder:/etc"})
    with pytest.raises(SearchError, match="index:"):
        client.set_alias(name, f"{a.collection}/missing")
    headers = {"X-API-Key": "s3cret"}
    assert http.get(f"/v1/aliases/{_name()}", headers=headers).status_code == 404
    assert http.post(f"/v1/aliases/{_name()}/rollback", headers=headers).status_code == 404
    bad = http.put(f"/v1/aliases/{name}", json={"index": a.name, "note": "a\x00b"}, headers=headers)
    assert bad.status_code in (400, 422)
    # A reranker that is not a name (the fuzzer's list of objects) is a 400, never a 500.
    listed = http.put(
        f"/v1/aliases/{name}", json={"index": a.name, "options": {"rerank": [{}]}}, headers=headers
    )
    assert listed.status_code == 400 and "options.rerank" in listed.json()["detail"]


def test_a_bare_config_name_means_the_projects_collection_in_cli_http_and_python(
    store, two_indexes, searcher, pg_url, tmp_path, monkeypatch, capsys
) -> None:
    """One rule for a bare name: the project's only collection (not `demo`), on every surface."""
    import httpx
    from chunkyard.orchestration.cli import main
    from chunkyard.retrieval.api.service import create_app

    from tests.service_process import serve_in_thread

    a, _ = two_indexes
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CHUNKYARD_PROJECT", "")
    (tmp_path / "docs").mkdir()
    assert main(["init", str(tmp_path / "p")]) == 0
    project = ["--project", str(tmp_path / "p")]
    assert main([*project, "add", a.collection, str(tmp_path / "docs")]) == 0
    monkeypatch.setenv("CHUNKYARD_PROJECT", str(tmp_path / "p"))
    query, bare = "the feline rested on the rug", a.name.split("/")[1]

    assert {hit.index for hit in searcher.search(query, bare, k=2)} == {a.name}  # Python
    with serve_in_thread(create_app(searcher)) as url:  # HTTP
        answered = httpx.post(f"{url}/v1/search", json={"query": query, "index": bare, "k": 2}, timeout=30)
    assert answered.status_code == 200 and answered.json()["index"] == a.name, answered.text
    capsys.readouterr()
    assert main([*project, "search", query, "--index", bare, "--no-service", "-k", "2"]) == 0  # CLI
    assert capsys.readouterr().out.startswith(f"{a.name}: 2 results")
