"""Shared helpers for the retrieval tests (no tests here): tiny specs, a paragraph chunker, a store."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from chunkyard.chunking.types import Chunk, Document
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

_PARAGRAPH = re.compile(r"[^\n]+(?:\n(?!\n)[^\n]*)*")


class ParagraphChunker:
    """One chunk per paragraph (blank-line separated), spans from regex matches (constructive).

    `vector_for(text)`, when given, sets `chunk.embedding` as late chunking would, so tests can
    exercise the precomputed-vector path without running the model.
    """

    def __init__(self, config_key: str, vector_for: Callable[[str], np.ndarray] | None = None) -> None:
        self.config_key = config_key
        self.vector_for = vector_for

    def chunk(self, document: Document) -> list[Chunk]:
        chunks = []
        for match in _PARAGRAPH.finditer(document.text):
            start, end = match.span()
            text = document.text[start:end]
            chunk = Chunk(
                document.id,
                start,
                end,
                text,
                token_count=len(text.split()),
                metadata={"paragraph": len(chunks)},
                config_key=self.config_key,
            )
            if self.vector_for is not None:
                chunk.embedding = self.vector_for(text)
            chunks.append(chunk)
        return chunks

    def chunk_batch(self, documents: Iterable[Document]) -> list[list[Chunk]]:
        return [self.chunk(d) for d in documents]


def make_spec(
    collection: str | None = None,
    name: str = "para",
    *,
    bm25: dict | None = None,
    hybrid: dict | None = None,
    chunker: dict | None = None,
) -> IndexSpec:
    """A spec in a fresh collection (tests share one database, so names must not collide)."""
    config = IndexConfig(
        name=name,
        chunker=chunker or {"strategy": "paragraph-test"},
        bm25=bm25 if bm25 is not None else {"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "standard"},
        hybrid=hybrid or {"fusion": "rrf", "rrf_k": 60, "candidates": 50},
    )
    return IndexSpec(collection or f"c{uuid.uuid4().hex[:10]}", config)


MULTILINGUAL = Path(__file__).parent / "data" / "multilingual"
ARTICLES = ("huerto.md", "tren.md", "biblioteca.md")
GARDEN_TEXT = (
    "Trains leave every hour from the coastal station. The night train runs on Fridays in summer.\n\n"
    "The library opens at nine. The community garden is near the bus station and has forty beds."
)


def multilingual_index(store, embedder, language: str, name: str) -> tuple[IndexSpec, dict[str, str]]:
    """Three articles of tests/data/multilingual/<language> in recursive chunks of 96 model tokens,
    indexed with the real model and Postgres: the spec, and each document's text by id."""
    from chunkyard.pipeline.graph import build_index

    docs = [Document(n, (MULTILINGUAL / language / n).read_text(encoding="utf-8")) for n in ARTICLES]
    config = IndexConfig(
        name=name,
        chunker={"strategy": "recursive", "size": 96, "overlap": 0, "tokenizer": "model"},
        bm25={"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "auto"},
    )
    spec = IndexSpec(make_spec().collection, config)
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder)
    return spec, {doc.id: doc.text for doc in docs}


def garden_index(store, embedder) -> IndexSpec:
    """`GARDEN_TEXT` as one document `a.md` in two paragraph chunks, English BM25."""
    from chunkyard.pipeline.graph import build_index

    spec = make_spec(bm25={"analyzer": "english"})
    store.documents.sync(spec.collection, [Document("a.md", GARDEN_TEXT)], [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec


def random_unit_vector_for(dim: int = 384, seed_salt: str = "") -> Callable[[str], np.ndarray]:
    """A deterministic pseudo-embedding per text (hash-seeded), for tests that need many vectors fast."""

    def vector_for(text: str) -> np.ndarray:
        seed = hash_text(seed_salt + text)
        vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
        return vector / np.linalg.norm(vector)

    return vector_for


def hash_text(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def publish_under_readers(searcher, index_name: str, publish: Callable[[], object]) -> object:
    """Run `publish()` while a thread searches `index_name` (hybrid, k=400) without pause; assert every
    answer held 400 chunks of one generation, that both versions were seen and that, once the new
    version ("beta", 2) showed, the old one never came back. The publish's report."""
    observations: list[tuple[set[str], int, int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                results = searcher.search("generation document paragraph", index_name, k=400, mode="hybrid")
                generations = {r.text.split()[1] for r in results}
                observations.append((generations, len(results), results[0].index_version))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.3)
    try:
        report = publish()
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not errors, errors
    assert all(len(gens) == 1 and count == 400 for gens, count, _ in observations), observations
    seen = [(next(iter(gens)), version) for gens, _, version in observations]
    assert ("alpha", 1) in seen and ("beta", 2) in seen
    first_beta = next(i for i, (gen, _) in enumerate(seen) if gen == "beta")
    assert all(gen == "beta" for gen, _ in seen[first_beta:])  # never back to the old version
    return report
