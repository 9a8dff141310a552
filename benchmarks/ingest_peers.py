"""The peers of `bench_ingest`: LlamaIndex's IngestionPipeline and Haystack's indexing pipeline.

Run by `benchmarks.bench_ingest` in the peers' own virtual environment (same torch, transformers and
sentence-transformers versions as chunkyard's, see `make bench-ingest`); imports nothing of chunkyard.
Each worker indexes the folder, then re-indexes after one document changes and after one is
deleted, and prints one JSON line with wall times, chunk counts, checks and its peak RSS.

    python -m benchmarks.ingest_peers llamaindex|haystack --db URL --docs DIR --model PATH --size 256
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any

# Long enough to dominate the chunk it lands in (about 130 words): a two-sentence note merged into a
# 256-token chunk of financial text ranked below the top 10 of 2,000 chunks for every system (the
# corpus talks about ledgers and counts), so the check failed for reasons that were not indexing.
CHANGED_TEXT = (
    "The zebra-striped lighthouse keeper counts forty-two herons every dawn. "
    "Each heron is logged in a green notebook kept beside the lighthouse lamp. "
    "On foggy mornings the herons stand on the black rocks below the tower, and the keeper "
    "climbs the spiral stairs with a brass telescope to see them through the mist. "
    "The youngest heron has a crooked grey feather and always lands last. "
    "In winter the keeper scatters small silver fish on the pier, and the herons wade out "
    "from the reeds to eat them while the foghorn sounds twice an hour. "
    "Sailors passing the island say the lighthouse keeper knows every heron by name, "
    "and that the birds gather at the lamp room window whenever a storm is coming from the west."
)
TOP_K = 10
# single-document changes and deletions timed per system, each on another document (median reported)
ROUNDS = 5


def read_docs(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.md"))}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def sqlalchemy_urls(url: str) -> tuple[str, str]:
    """(sync psycopg2, async asyncpg) SQLAlchemy URLs of a libpq URL."""
    rest = url.split("://", 1)[1]
    return f"postgresql+psycopg2://{rest}", f"postgresql+asyncpg://{rest}"


# ---------------------------------------------------------------------------------------------
# LlamaIndex


def run_llamaindex(args: argparse.Namespace) -> dict[str, Any]:
    started_import = time.perf_counter()
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.postgres import PGVectorStore
    from transformers import AutoTokenizer

    Settings.llm = None
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    embed_model = HuggingFaceEmbedding(model_name=args.model, device="cpu", embed_batch_size=args.batch_size)
    load_seconds = time.perf_counter() - started_import
    sync_url, async_url = sqlalchemy_urls(args.db)
    vector_store = PGVectorStore.from_params(
        connection_string=sync_url,
        async_connection_string=async_url,
        table_name="llamaindex_bench",
        embed_dim=384,
        hnsw_kwargs={"hnsw_m": 16, "hnsw_ef_construction": 64, "hnsw_dist_method": "vector_cosine_ops"},
    )
    splitter = SentenceSplitter(
        chunk_size=args.size, chunk_overlap=0, tokenizer=tokenizer.tokenize, include_metadata=False
    )
    pipeline = IngestionPipeline(
        transformations=[splitter, embed_model],
        vector_store=vector_store,
        docstore=SimpleDocumentStore(),
        docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE,
    )
    folder = Path(args.docs)

    def documents() -> list[Any]:
        return [
            Document(
                text=text,
                id_=name,
                metadata={"file_name": name},
                excluded_embed_metadata_keys=["file_name"],
                excluded_llm_metadata_keys=["file_name"],
            )
            for name, text in read_docs(folder).items()
        ]

    def expected_chunks() -> int:
        return sum(len(splitter.get_nodes_from_documents([d])) for d in documents())

    def stored_chunks() -> int:
        from sqlalchemy import text

        with vector_store._engine.connect() as conn:  # the store's own engine
            return int(conn.execute(text("SELECT count(*) FROM data_llamaindex_bench")).scalar())

    def query_finds(needle: str) -> bool:
        index = VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model)
        nodes = index.as_retriever(similarity_top_k=TOP_K).retrieve(needle)
        return any(needle[:30] in n.node.get_content() for n in nodes)

    def timed_run() -> float:
        started = time.perf_counter()
        pipeline.run(documents=documents())
        return time.perf_counter() - started

    return exercise(
        "llamaindex", folder, timed_run, stored_chunks, expected_chunks, query_finds, load_seconds
    )


# ---------------------------------------------------------------------------------------------
# Haystack


def run_haystack(args: argparse.Namespace) -> dict[str, Any]:
    started_import = time.perf_counter()
    from haystack import Document, Pipeline
    from haystack.components.preprocessors import RecursiveDocumentSplitter
    from haystack.components.writers import DocumentWriter
    from haystack.document_stores.types import DuplicatePolicy
    from haystack.utils import Secret
    from haystack_integrations.components.embedders.sentence_transformers import (
        SentenceTransformersDocumentEmbedder,
        SentenceTransformersTextEmbedder,
    )
    from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever
    from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

    store = PgvectorDocumentStore(
        connection_string=Secret.from_token(args.db),
        table_name="haystack_bench",
        embedding_dimension=384,
        vector_function="cosine_similarity",
        search_strategy="hnsw",
        hnsw_index_creation_kwargs={"m": 16, "ef_construction": 64},
        recreate_table=True,
    )
    # Haystack's token splitting counts tiktoken tokens; `word` units with the ratio measured on
    # this corpus give chunks of about `size` model tokens (the JSON reports the mean).
    splitter = RecursiveDocumentSplitter(
        split_length=args.haystack_words,
        split_overlap=0,
        split_unit="word",
        separators=["\n\n", "\n", ". ", " "],
    )
    splitter.warm_up()
    embedder = SentenceTransformersDocumentEmbedder(model=args.model, device=None, batch_size=args.batch_size)
    embedder.warm_up()
    text_embedder = SentenceTransformersTextEmbedder(model=args.model)
    text_embedder.warm_up()
    load_seconds = time.perf_counter() - started_import
    pipeline = Pipeline()
    pipeline.add_component("splitter", splitter)
    pipeline.add_component("embedder", embedder)
    pipeline.add_component("writer", DocumentWriter(document_store=store, policy=DuplicatePolicy.OVERWRITE))
    pipeline.connect("splitter.documents", "embedder.documents")
    pipeline.connect("embedder.documents", "writer.documents")
    folder = Path(args.docs)
    indexed: dict[str, str] = {}  # file -> sha256: Haystack has no incremental manager, so the user keeps one

    def docs_for(names: dict[str, str]) -> list[Any]:
        return [Document(content=text, meta={"file_name": name}) for name, text in names.items()]

    def timed_run() -> float:
        started = time.perf_counter()
        current = read_docs(folder)
        hashes = {n: hashlib.sha256(t.encode()).hexdigest() for n, t in current.items()}
        stale = [n for n in indexed if hashes.get(n) != indexed[n]]
        if stale:
            store.delete_by_filter({"field": "meta.file_name", "operator": "in", "value": stale})
        todo = {n: t for n, t in current.items() if indexed.get(n) != hashes[n]}
        if todo:
            pipeline.run({"splitter": {"documents": docs_for(todo)}})
        indexed.clear()
        indexed.update(hashes)
        return time.perf_counter() - started

    def expected_chunks() -> int:
        return sum(len(splitter.run([d])["documents"]) for d in docs_for(read_docs(folder)))

    def query_finds(needle: str) -> bool:
        vector = text_embedder.run(text=needle)["embedding"]
        found = PgvectorEmbeddingRetriever(document_store=store, top_k=TOP_K).run(query_embedding=vector)
        return any(needle[:30] in (d.content or "") for d in found["documents"])

    return exercise(
        "haystack", folder, timed_run, store.count_documents, expected_chunks, query_finds, load_seconds
    )


# ---------------------------------------------------------------------------------------------


def exercise(system, folder, timed_run, stored_chunks, expected_chunks, query_finds, load_seconds) -> dict:
    """Full index, then ROUNDS single-document changes and ROUNDS deletions (another document each
    time): wall times (the median of the rounds, every round kept), chunk counts and the checks."""
    files = sorted(folder.glob("*.md"))
    changed = files[len(files) // 2 :][:ROUNDS]
    deleted = files[len(files) // 3 :][:ROUNDS]
    full = timed_run()
    chunks_full = stored_chunks()
    checks = [chunks_full == expected_chunks()]
    updates, deletes = [], []
    for round_number, path in enumerate(changed, 1):
        # a new text each round: no system may answer a round from an embedding of the one before
        note = f"{CHANGED_TEXT} Entry {round_number} of the keeper's log."
        path.write_text(path.read_text(encoding="utf-8") + "\n" + note + "\n", encoding="utf-8")
        updates.append(timed_run())
        chunks_update = stored_chunks()
        checks.append(chunks_update == expected_chunks())
    finds_changed = query_finds(CHANGED_TEXT)
    deleted_head = deleted[0].read_text(encoding="utf-8").strip().splitlines()[0][:200]
    for path in deleted:
        path.unlink()
        deletes.append(timed_run())
        chunks_delete = stored_chunks()
        checks.append(chunks_delete == expected_chunks())
    return {
        "system": system,
        "model_load_seconds": round(load_seconds, 3),
        "full_seconds": round(full, 3),
        "chunks": chunks_full,
        "chunks_per_second": round(chunks_full / full, 2),
        "update_seconds": round(statistics.median(updates), 3),
        "delete_seconds": round(statistics.median(deletes), 3),
        "update_rounds": [round(t, 3) for t in updates],
        "delete_rounds": [round(t, 3) for t in deletes],
        "chunks_after_update": chunks_update,
        "chunks_after_delete": chunks_delete,
        "check_chunk_counts": all(checks),
        "check_query_finds_changed_text": bool(finds_changed),
        "deleted_probe": deleted_head[:60],
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=["llamaindex", "haystack"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--docs", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--haystack-words", type=int, default=150)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(int(__import__("os").environ.get("BENCH_THREADS", "2")))
    result = run_llamaindex(args) if args.system == "llamaindex" else run_haystack(args)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
