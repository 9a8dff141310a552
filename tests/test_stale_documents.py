"""A file that stops loading keeps serving its last good text, and its results say so (issue 13 #14)."""

from __future__ import annotations

from pathlib import Path

from chunkyard.chunking.documents.folder import load_folder
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher

from tests.test_indexing_support import ParagraphChunker, make_spec


def _sync(store, spec, folder: Path) -> None:
    documents, failures = load_folder(folder)
    store.documents.sync(spec.collection, documents, failures)


def test_a_document_whose_file_breaks_is_served_marked_stale_until_it_loads_again(
    store, embedder, tmp_path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "glaciers.txt").write_text("Glaciers carve valleys as they slowly move downhill.\n")
    (folder / "bees.txt").write_text("Honeybees communicate the location of flowers with a dance.\n")
    spec = make_spec()
    chunker = ParagraphChunker(spec.config.config_hash)
    _sync(store, spec, folder)
    build_index(store, spec, embedder, chunker=chunker)
    searcher = Searcher(store, embedder)

    def top(query: str):
        return searcher.search(query, spec.name, k=1, mode="bm25")[0]

    assert top("glaciers valleys").stale is None

    (folder / "glaciers.txt").write_bytes(b"\x00\x01\x02\x03" * 200)  # no longer text
    _sync(store, spec, folder)
    hit = top("glaciers valleys")
    assert hit.doc_id == "glaciers.txt" and "Glaciers carve valleys" in hit.text  # the last good text
    assert hit.stale and "text" in hit.stale  # the loader's reason
    assert top("honeybees flowers").stale is None

    (folder / "glaciers.txt").write_text("Glaciers carve valleys as they slowly move downhill.\n")
    _sync(store, spec, folder)
    assert top("glaciers valleys").stale is None


def test_the_stale_mark_reaches_http_clients(store, embedder, tmp_path) -> None:
    from chunkyard.retrieval.api.service import create_app
    from fastapi.testclient import TestClient

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "volcano.txt").write_text("Volcanoes erupt when magma rises through cracks.\n")
    spec = make_spec()
    _sync(store, spec, folder)
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    (folder / "volcano.txt").write_bytes(b"\x00\xff" * 300)
    _sync(store, spec, folder)
    with TestClient(create_app(Searcher(store, embedder))) as client:
        body = client.post("/v1/search", json={"query": "magma", "index": spec.name, "mode": "bm25"}).json()
    assert body["results"][0]["stale"]
