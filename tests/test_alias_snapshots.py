"""Copy-on-pin on real Postgres: an alias keeps serving the version it pinned after the index is republished."""

from __future__ import annotations

import uuid

import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher, aliases
from chunkyard.retrieval.store.indexes import partition_names

from tests.test_indexing_support import ParagraphChunker, make_spec

QUERY = "lighthouse keeper painted the tower"
OTHER = "Sourdough bread needs flour, water, salt and a lively starter."


def _docs(colour: str) -> list[Document]:
    return [
        Document("doc0", f"The lighthouse keeper painted the tower {colour} every spring.\n\n{OTHER}"),
        Document("doc1", "Glaciers carve valleys as the ice slowly moves downhill."),
    ]


@pytest.fixture
def republish(store, embedder):
    """A fresh one-config index; each call syncs the documents in `colour` and publishes them."""
    spec = make_spec(f"c{uuid.uuid4().hex[:10]}", "para")

    def publish(colour: str) -> int:
        store.documents.sync(spec.collection, _docs(colour), [])
        build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
        return int(store.indexes.version(spec.name))

    publish.spec = spec
    return publish


@pytest.fixture(scope="module")
def searcher(store, embedder) -> Searcher:
    return Searcher(store, embedder)


def _top(searcher: Searcher, index: str, **options) -> tuple[str, int, str]:
    top = searcher.search(QUERY, index, k=1, **options)[0]
    return top.index, top.index_version, top.text


def _alias() -> str:
    return f"snap-{uuid.uuid4().hex[:8]}"


def test_a_pinned_alias_serves_its_version_after_the_index_is_republished(store, republish, searcher) -> None:
    index = republish.spec.name
    assert republish("red") == 1
    name = _alias()
    pinned = aliases.set_alias(store, name, index, {"mode": "bm25"})
    assert (pinned.index, pinned.pinned_version, pinned.snapshot) == (index, 1, index.snapshot(1))
    assert republish("blue") == 2
    # the index answers with v2's text, the alias with v1's (named as the index at v1)
    assert _top(searcher, index, mode="bm25") == (
        index,
        2,
        "The lighthouse keeper painted the tower blue every spring.",
    )
    assert _top(searcher, name) == (index, 1, "The lighthouse keeper painted the tower red every spring.")
    assert "red" in _top(searcher, name, mode="dense")[2]
    assert "red" in _top(searcher, name, mode="hybrid")[2]
    current = aliases.get_alias(store, name)
    assert (current.current_version, current.drifted, current.served) == (2, False, index.snapshot(1))
    # the snapshot is an index of its own: its BM25 stats, documents and HNSW graph were copied
    info = store.indexes.info(index.snapshot(1))
    assert (info["version"], info["chunk_count"], info["document_count"]) == (1, 3, 2)
    with store.connection() as conn:
        hnsw = conn.execute(
            "SELECT to_regclass(%s)", (partition_names(index.snapshot(1))["hnsw"],)
        ).fetchone()
    assert hnsw[0] is not None
    # pinning the same version again shares the copy; the snapshot can be queried by name
    again = aliases.set_alias(store, _alias(), index.snapshot(1), {"mode": "bm25"})
    assert (again.index, again.pinned_version, again.snapshot) == (index, 1, index.snapshot(1))
    assert _top(searcher, index.snapshot(1), mode="bm25") == _top(searcher, name)


def test_rollback_after_repinning_returns_the_old_content(store, republish, searcher) -> None:
    index = republish.spec.name
    republish("red")
    name = _alias()
    aliases.set_alias(store, name, index, {"mode": "bm25"})
    republish("blue")
    repinned = aliases.set_alias(store, name, index, {"mode": "bm25"})
    assert (repinned.pinned_version, repinned.snapshot) == (2, index.snapshot(2))
    assert "blue" in _top(searcher, name)[2]
    republish("green")
    back = aliases.rollback(store, name)
    assert (back.pinned_version, back.served) == (1, index.snapshot(1))
    assert _top(searcher, name) == (index, 1, "The lighthouse keeper painted the tower red every spring.")
    assert "green" in _top(searcher, index, mode="bm25")[2]


def test_retention_drops_the_snapshots_no_kept_target_pins(store, republish) -> None:
    index = republish.spec.name
    name, other = _alias(), _alias()
    for colour in ("red", "blue", "green"):
        version = republish(colour)
        aliases.set_alias(store, name, index, {"mode": "bm25"}, keep=1)
        if version == 1:
            aliases.set_alias(store, other, index, {"mode": "dense"})  # a second alias pins v1 too
    assert [t.pinned_version for t in aliases.history(store, name)] == [3, 2]

    def kept() -> list[int]:
        return [v for v in (1, 2, 3) if store.indexes.info(index.snapshot(v)) is not None]

    assert kept() == [1, 2, 3]  # v1 left `name`'s chain but `other` still pins it
    aliases.drop_alias(store, other)
    assert kept() == [2, 3]
    with store.connection() as conn:
        gone = conn.execute(
            "SELECT to_regclass(%s)", (partition_names(index.snapshot(1))["chunks"],)
        ).fetchone()
    assert gone[0] is None
    republish("grey")
    aliases.set_alias(store, name, index, {"mode": "bm25"}, keep=1)
    assert kept() == [3] and store.indexes.info(index.snapshot(4)) is not None
    assert store.indexes.version(index) == 4  # the live index is never dropped by retention
    aliases.drop_alias(store, name)
    assert kept() == [] and store.indexes.info(index.snapshot(4)) is None
