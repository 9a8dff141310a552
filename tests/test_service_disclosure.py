"""What the service tells whom: `/readyz` details only with the key; unsupported filter operators named in a 422."""

from __future__ import annotations

import uuid

import httpx
import pytest
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import SearchOptions
from chunkyard.retrieval.store import Store

from tests.service_process import serve_in_thread

KEY = "readyz-test-key-31c7"


@pytest.fixture(scope="module")
def base(pg_url: str, embedder) -> str:
    store = Store(pg_url)
    store.migrate()
    with serve_in_thread(create_app(Searcher(store, embedder), api_key=KEY)) as url:
        yield url


def test_a_stored_admin_key_sees_the_details_too(base: str, pg_url: str) -> None:
    _, token = Store(pg_url).keys.create(f"readyz-admin-{uuid.uuid4().hex[:6]}", "admin", actor="test")
    admin = httpx.get(f"{base}/readyz", headers={"X-API-Key": token}, timeout=30)
    assert admin.status_code == 200 and {"schema_version", "database", "indexes"} <= set(admin.json())
    malformed = httpx.get(f"{base}/readyz", headers={"X-API-Key": "cky_" + "x" * 43}, timeout=30)
    assert malformed.status_code == 200 and malformed.json() == {"status": "ready"}


def test_readyz_tells_versions_and_counts_only_to_a_caller_with_the_key(base: str) -> None:
    anonymous = httpx.get(f"{base}/readyz", timeout=30)
    wrong = httpx.get(f"{base}/readyz", headers={"X-API-Key": KEY + "x"}, timeout=30)
    holder = httpx.get(f"{base}/readyz", headers={"X-API-Key": KEY}, timeout=30)
    bearer = httpx.get(f"{base}/readyz", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    for response in (anonymous, wrong):
        assert response.status_code == 200 and response.json() == {"status": "ready"}
        assert "pgvector" not in response.text.lower() and "postgres" not in response.text.lower()
    for response in (holder, bearer):
        assert response.status_code == 200 and response.json()["status"] == "ready"
        assert {"schema_version", "database", "indexes"} <= set(response.json())
        assert "pgvector" in response.json()["database"]


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        ({"doc_id": {"$regex": "^a"}}, "filters.doc_id: operator '$regex' is not supported"),
        ({"$or": [{"lang": "en"}, {"lang": "de"}]}, "filters: operator '$or' is not supported"),
        ({"tags": [{"$in": ["a"]}]}, "filters.tags[0]: operator '$in' is not supported"),
    ],
)
def test_an_unknown_filter_operator_is_a_422_naming_it(base: str, filters: dict, named: str) -> None:
    body = {"query": "anything", "index": "nowhere/para", "filters": filters}
    response = httpx.post(f"{base}/v1/search", json=body, headers={"X-API-Key": KEY}, timeout=30)
    assert response.status_code == 422, response.text
    assert response.json()["message"].startswith(named)
    with pytest.raises(SearchError, match=named.replace("$", r"\$").replace("[", r"\[").replace("]", r"\]")):
        SearchOptions(filters=filters)  # the library and the CLI refuse it alike


def test_plain_containment_filters_still_pass() -> None:
    assert SearchOptions(filters={"lang": "en", "tags": ["a"], "meta": {"x": 1}}).filters["lang"] == "en"
