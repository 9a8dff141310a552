"""Scoped keys, per-key limits and the audit log, on the real service and the real Postgres (issue 37)."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.key_admin import create_key
from chunkyard.retrieval.api.rate_limits import Limits
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.integrations.client import (
    AccessDeniedError,
    AuthenticationError,
    Client,
    RateLimitedError,
)
from chunkyard.retrieval.query import Searcher, aliases
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.api_key import ApiKeyError, parse_expiry, token_hash
from fastapi.testclient import TestClient

from tests.service_process import serve_in_thread, service
from tests.test_indexing_support import ParagraphChunker, make_spec

BOOTSTRAP = "team-bootstrap-key"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def searcher(pg_url: str, embedder) -> Searcher:
    store = Store(pg_url)
    store.migrate()
    return Searcher(store, embedder)


@pytest.fixture(scope="module")
def two_indexes(searcher: Searcher, embedder) -> tuple[str, str]:
    """An index in collection A and one in collection B (two tiny documents each)."""
    names = []
    for words in ("Lighthouses guide ships past the reef.", "Glaciers carve valleys slowly."):
        spec = make_spec(bm25={"analyzer": "english"})
        docs = [Document("a.md", words), Document("b.md", "Queues hold pending work.")]
        searcher.store.documents.sync(spec.collection, docs, [])
        build_index(searcher.store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
        names.append(str(spec.name))
    return names[0], names[1]


@pytest.fixture(scope="module")
def http(searcher: Searcher) -> TestClient:
    return TestClient(create_app(searcher, api_key=BOOTSTRAP), raise_server_exceptions=False)


def _key(store: Store, scope: str, *collections: str, **options) -> tuple[str, str]:
    name = _unique(scope)
    _, token = create_key(store, name, scope, collections, actor="test", **options)
    return name, token


def _auth(token: str) -> dict[str, str]:
    return {"X-API-Key": token}


def test_a_search_key_reads_only_its_collections(http: TestClient, searcher: Searcher, two_indexes) -> None:
    index_a, index_b = two_indexes
    collection_a = index_a.split("/")[0]
    _, token = _key(searcher.store, "search", collection_a)
    alias_b = _unique("b")
    aliases.set_alias(searcher.store, alias_b, index_b, actor="test")

    ok = http.post("/v1/search", json={"query": "ships", "index": index_a, "k": 2}, headers=_auth(token))
    assert ok.status_code == 200, ok.text
    for other in (
        index_b,
        "nosuchcollection/para",
        alias_b,
    ):  # B, a collection that does not exist, B's alias
        refused = http.post("/v1/search", json={"query": "ships", "index": other}, headers=_auth(token))
        assert refused.status_code == 403, (other, refused.text)
        assert refused.json()["detail"] == f"key {token_name(searcher, token)!r} may not read {other!r}"
    listed = http.get("/v1/indexes", headers=_auth(token)).json()
    assert [info["name"] for info in listed] == [index_a]
    assert alias_b not in [a["alias"] for a in http.get("/v1/aliases", headers=_auth(token)).json()]
    assert (
        http.get(f"/v1/aliases/{alias_b}", headers=_auth(token)).status_code == 404
    )  # as if it did not exist
    put = http.put(f"/v1/aliases/{_unique('x')}", json={"index": index_a}, headers=_auth(token))
    assert put.status_code == 403 and "admin" in put.json()["detail"]
    assert http.post(f"/v1/aliases/{alias_b}/rollback", headers=_auth(token)).status_code == 403
    assert http.get("/v1/keys", headers=_auth(token)).status_code == 403
    assert http.get("/v1/audit", headers=_auth(token)).status_code == 403
    assert http.get("/metrics", headers=_auth(token)).status_code == 403
    # the bootstrap key (CHUNKYARD_API_KEY) is an admin key: it sees both
    assert {i["name"] for i in http.get("/v1/indexes", headers=_auth(BOOTSTRAP)).json()} >= {index_a, index_b}


def token_name(searcher: Searcher, token: str) -> str:
    key = searcher.store.keys.by_token(token)
    assert key is not None
    return key.name


def test_client_takes_a_stored_key(searcher: Searcher, two_indexes) -> None:
    index_a, index_b = two_indexes
    _, token = _key(searcher.store, "search", index_a.split("/")[0])
    with (
        serve_in_thread(create_app(searcher, api_key=BOOTSTRAP)) as url,
        Client(url, api_key=token) as client,
    ):
        assert client.search("ships", index=index_a, k=1)
        with pytest.raises(AccessDeniedError, match="may not read"):
            client.search("ships", index=index_b, k=1)
        with pytest.raises(AuthenticationError, match="malformed"):
            Client(url, api_key="cky_short").indexes()


def test_bad_tokens_get_one_clear_401(http: TestClient) -> None:
    cases = {
        "": "missing API key",
        "cky_short": "malformed API key",
        "not-a-key-at-all": "malformed API key",
        "cky_" + "A" * 43: "unknown API key",
    }
    for token, detail in cases.items():
        response = http.get("/v1/indexes", headers=_auth(token) if token else {})
        assert response.status_code == 401 and response.json()["detail"].startswith(detail), (
            token,
            response.text,
        )
    bearer = http.get("/v1/indexes", headers={"Authorization": f"Bearer {BOOTSTRAP}"})
    assert bearer.status_code == 200


def test_bad_key_requests_are_refused_and_write_nothing(searcher: Searcher, two_indexes) -> None:
    store = searcher.store
    before = len(store.keys.list())
    for call, message in [
        (lambda: create_key(store, _unique("k"), "owner", [], actor="t"), "scope: expected one of"),
        (
            lambda: create_key(store, _unique("k"), "search", ["nosuchcollection"], actor="t"),
            "does not exist",
        ),
        (lambda: create_key(store, _unique("k"), "search", [], actor="t"), "at least one --collection"),
        (lambda: create_key(store, "Bad Name", "admin", [], actor="t"), "name: must be"),
        (lambda: create_key(store, _unique("k"), "admin", [], actor="t", expires="yesterday"), "expires:"),
        (lambda: store.keys.revoke("no-such-key", actor="t"), "no key named"),
    ]:
        with pytest.raises(ApiKeyError, match=message):
            call()
    assert len(store.keys.list()) == before
    name, _ = _key(store, "admin")
    with pytest.raises(ApiKeyError, match="exists already"):
        create_key(store, name, "admin", [], actor="t")
    assert parse_expiry("2h", datetime(2030, 1, 1, tzinfo=UTC)) == datetime(2030, 1, 1, 2, tzinfo=UTC)


def test_tokens_are_stored_hashed_never_in_clear(searcher: Searcher, pg_url: str) -> None:
    name, token = _key(searcher.store, "admin")
    with searcher.store.connection() as conn:
        row = conn.execute("SELECT * FROM api_keys WHERE name = %s", (name,)).fetchone()
        audit = conn.execute(
            "SELECT before::text, after::text FROM audit_log WHERE target = %s", (name,)
        ).fetchall()
    assert token_hash(token) in row and token not in [str(v) for v in row]
    assert all(token not in (text or "") for entry in audit for text in entry)


def test_a_revoked_or_expired_key_is_refused_within_a_second_on_every_process(
    searcher: Searcher, pg_url: str, two_indexes
) -> None:
    import httpx

    name, token = _key(searcher.store, "search", two_indexes[0].split("/")[0])
    short_name, short = _key(searcher.store, "admin")
    apps = [TestClient(create_app(searcher, api_key=BOOTSTRAP)) for _ in range(2)]
    with (
        service("--database-url", pg_url, "--cold", "--api-key", BOOTSTRAP) as (url, _),
        httpx.Client(base_url=url, timeout=30) as process,
    ):
        with searcher.store.connection() as conn:
            expires_at = conn.execute(
                "UPDATE api_keys SET expires_at = now() + interval '4 seconds' WHERE name = %s"
                " RETURNING expires_at",
                (short_name,),
            ).fetchone()[0]
        callers = [*apps, process]  # two apps in this process and a service process of its own
        for caller in callers:  # every process has both keys cached now
            assert caller.get("/v1/indexes", headers=_auth(token)).status_code == 200
            assert caller.get("/v1/indexes", headers=_auth(short)).status_code == 200
        searcher.store.keys.revoke(name, actor="test")
        time.sleep(1.0)  # the promise: refused within a second of the revocation
        for caller in callers:
            revoked = caller.get("/v1/indexes", headers=_auth(token))
            assert revoked.status_code == 401 and "revoked" in revoked.json()["detail"]
        time.sleep(max(0.0, (expires_at - datetime.now(UTC)).total_seconds()) + 0.05)
        for caller in callers:
            expired = caller.get("/v1/indexes", headers=_auth(short))
            assert expired.status_code == 401 and "expired" in expired.json()["detail"]


def test_rate_limits_answer_429_with_retry_after(searcher: Searcher, two_indexes) -> None:
    app = create_app(searcher, api_key=BOOTSTRAP)
    http = TestClient(app)
    index_a = two_indexes[0]
    slow, token = _key(searcher.store, "search", index_a.split("/")[0], rate_per_s=0.1)
    assert http.get("/v1/indexes", headers=_auth(token)).status_code == 200  # the burst: one request
    limited = http.get("/v1/indexes", headers=_auth(token))
    assert limited.status_code == 429 and "rate limit" in limited.json()["detail"]
    assert 1 <= int(limited.headers["Retry-After"]) <= 10
    # concurrent searches: while its one slot is taken, another search of that key is refused
    busy, busy_token = _key(searcher.store, "search", index_a.split("/")[0], max_concurrent=1, rate_per_s=0)
    with app.state.rate_limiter.search_slot(busy, Limits(0, 1)):
        held = http.post("/v1/search", json={"query": "ships", "index": index_a}, headers=_auth(busy_token))
        assert held.status_code == 429 and held.headers["Retry-After"] == "1"
    assert (
        http.post(
            "/v1/search", json={"query": "ships", "index": index_a}, headers=_auth(busy_token)
        ).status_code
        == 200
    )
    with serve_in_thread(app) as url, Client(url, api_key=token) as client:  # the client says when to retry
        with pytest.raises(RateLimitedError) as limited_error:
            client.indexes()
        assert 1 <= limited_error.value.retry_after_s <= 10
    # other keys are not affected by one key's limit
    assert http.get("/v1/indexes", headers=_auth(BOOTSTRAP)).status_code == 200


def test_every_admin_action_is_in_the_audit_log(http: TestClient, searcher: Searcher, two_indexes) -> None:
    index_a, index_b = two_indexes
    admin_name, admin = _key(searcher.store, "admin")
    other_name, other = _key(searcher.store, "admin")
    alias = _unique("docs")
    assert http.put(f"/v1/aliases/{alias}", json={"index": index_a}, headers=_auth(admin)).status_code == 200
    # two admins move one alias at once: both succeed one after the other, and both are logged
    answers: list[int] = []

    def move(token: str, index: str) -> None:
        answers.append(
            http.put(f"/v1/aliases/{alias}", json={"index": index}, headers=_auth(token)).status_code
        )

    threads = [threading.Thread(target=move, args=a) for a in ((admin, index_b), (other, index_a))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200, 200]
    assert http.post(f"/v1/aliases/{alias}/rollback", headers=_auth(admin)).status_code == 200
    created = http.post("/v1/keys", json={"name": _unique("app"), "scope": "search", "collections": [index_a.split("/")[0]]}, headers=_auth(admin))  # fmt: skip
    assert created.status_code == 201 and created.json()["token"].startswith("cky_")
    new_name = created.json()["name"]
    assert http.delete(f"/v1/keys/{new_name}", headers=_auth(other)).status_code == 200
    assert http.delete(f"/v1/keys/{new_name}", headers=_auth(other)).status_code == 400  # revoked already
    aliases.set_alias(searcher.store, alias, index_b, actor="promotion", action="alias.promote")

    entries = http.get("/v1/audit", params={"target": alias}, headers=_auth(admin)).json()
    assert [e["action"] for e in entries] == ["alias.promote", "alias.rollback", *["alias.set"] * 3]
    moves = entries[2:4][::-1]  # the two concurrent moves, in the order they committed
    assert {m["actor"] for m in moves} == {admin_name, other_name}
    assert moves[1]["before"]["generation"] == moves[0]["after"]["generation"]  # neither move was lost
    assert entries[0]["actor"] == "promotion" and entries[-1]["before"] is None
    keyed = http.get("/v1/audit", params={"target": new_name}, headers=_auth(admin)).json()
    assert [(e["action"], e["actor"]) for e in keyed] == [
        ("key.revoke", other_name),
        ("key.create", admin_name),
    ]
    assert keyed[0]["before"]["status"] == "active" and keyed[0]["after"]["status"] == "revoked"
    assert all("token" not in (e["after"] or {}) for e in keyed)


def test_cli_keys_and_audit(searcher: Searcher, pg_url: str, two_indexes, monkeypatch, capsys) -> None:
    from chunkyard.orchestration.cli import main

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.delenv("CHUNKYARD_API_KEY", raising=False)
    collection = two_indexes[0].split("/")[0]
    name = _unique("cli")
    assert (
        main(["keys", "create", name, "--scope", "search", "--collection", collection, "--expires", "30d"])
        == 0
    )
    out = capsys.readouterr().out
    token = [line for line in out.splitlines() if line.startswith("cky_")][0]
    assert searcher.store.keys.by_token(token).name == name and "CHUNKYARD_API_KEY" in out
    assert (
        main(["keys", "create", _unique("cli"), "--scope", "search", "--collection", "nosuchcollection"]) == 2
    )
    assert "collection: 'nosuchcollection' does not exist" in capsys.readouterr().err
    assert main(["keys", "list"]) == 0
    assert f"{name}  search  {collection}  active" in capsys.readouterr().out
    assert main(["keys", "revoke", name]) == 0
    assert main(["keys", "revoke", name]) == 2
    assert "revoked already" in capsys.readouterr().err
    assert main(["audit", "--target", name]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "key.revoke" in lines[0]
        and "search active -> search revoked" in lines[0]
        and "key.create" in lines[1]
    )


def test_an_expiry_in_the_past_is_refused() -> None:
    with pytest.raises(ApiKeyError, match="in the past"):
        parse_expiry((datetime.now(UTC) - timedelta(days=1)).isoformat())


def test_the_ui_proxy_takes_stored_admin_keys(searcher: Searcher, two_indexes) -> None:
    """The proxy (no database of its own) asks the query service; a search key or a revoked one is refused."""
    from chunkyard.orchestration.ui_proxy import build_app
    from chunkyard.orchestration.ui_proxy_keys import StoredKeys
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    upstream = Starlette(routes=[Route("/{path:path}", lambda request: PlainTextResponse("dagster ui"))])
    admin_name, admin = _key(searcher.store, "admin")
    _, search = _key(searcher.store, "search", two_indexes[0].split("/")[0])
    with (
        serve_in_thread(create_app(searcher, api_key=BOOTSTRAP)) as api,
        serve_in_thread(upstream) as web,
        TestClient(build_app(web, BOOTSTRAP, StoredKeys(api))) as proxy,
    ):
        ok = proxy.get("/runs", headers={"Authorization": f"Bearer {admin}"})
        assert ok.status_code == 200 and ok.text == "dagster ui" and "set-cookie" not in ok.headers
        assert proxy.get("/runs", headers={"Authorization": f"Bearer {search}"}).status_code == 401
        booted = proxy.get("/runs", headers={"Authorization": f"Bearer {BOOTSTRAP}"})
        assert booted.status_code == 200 and "set-cookie" in booted.headers
        proxy.cookies.clear()  # the bootstrap key's cookie would open it by itself
        searcher.store.keys.revoke(admin_name, actor="test")
        time.sleep(1.0)
        assert proxy.get("/runs", headers={"Authorization": f"Bearer {admin}"}).status_code == 401


def test_changes_outside_the_service_are_audited_as_local(searcher: Searcher, two_indexes) -> None:
    """`chunkyard alias set/rollback` (the library without a key) is logged as `local:<user>`."""
    alias = _unique("cli-alias")
    aliases.set_alias(searcher.store, alias, two_indexes[0])
    aliases.set_alias(searcher.store, alias, two_indexes[1])
    aliases.rollback(searcher.store, alias)
    entries = searcher.store.audit.entries(target=alias)
    assert [e.action for e in entries] == ["alias.rollback", "alias.set", "alias.set"]
    assert all(e.actor.startswith("local") for e in entries)
    assert entries[0].before["index"] == two_indexes[1] and entries[0].after["index"] == two_indexes[0]
