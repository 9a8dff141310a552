"""schemathesis against the served OpenAPI (real uvicorn, real Postgres, real model): no case gives a 5xx.

Fixed seed (hypothesis `derandomize`), bounded examples per operation and generation mode, so a run
is repeatable and takes well under a minute; every 5xx found is reported with its case.
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.store import Store
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from tests.service_process import serve_in_thread
from tests.test_indexing_support import ParagraphChunker, make_spec

EXAMPLES = {GenerationMode.POSITIVE: 150, GenerationMode.NEGATIVE: 150}
API_KEY = "fuzz-key"


@pytest.fixture(scope="module")
def base_url(pg_url: str, embedder):
    store = Store(pg_url)
    store.migrate()
    searcher = Searcher(store, embedder)
    spec = make_spec(bm25={"analyzer": "english"})
    store.documents.sync(spec.collection, [Document("f.md", "Fuzzing finds bugs.\n\nQueues hold work.")], [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    with serve_in_thread(create_app(searcher, api_key=API_KEY)) as url:
        yield url


@pytest.mark.parametrize("mode", list(EXAMPLES), ids=lambda m: m.value)
def test_no_generated_request_gets_a_5xx(base_url: str, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    failures: list[str] = []
    session = requests.Session()
    for result in schema.get_all_operations():
        _fuzz(result.ok(), mode, base_url, session, failures)
    assert not failures, "\n".join(failures[:10])


def _fuzz(
    operation, mode: GenerationMode, base_url: str, session: requests.Session, failures: list[str]
) -> None:
    """EXAMPLES[mode] cases of one operation, with and without the key; 5xx go to `failures`."""

    @settings(
        max_examples=EXAMPLES[mode],
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case) -> None:
        for headers in ({"X-API-Key": API_KEY}, {}):
            response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
            if response.status_code >= 500:
                failures.append(
                    f"{operation.label}: {response.status_code} {response.text[:200]} for {case!r}"
                )

    try:
        check()
    except Unsatisfiable:  # nothing to make invalid (no parameters, no body): the positive run covers it
        assert mode is GenerationMode.NEGATIVE
