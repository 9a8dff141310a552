"""chunkyard retrieval: Postgres/pgvector store, embedder, BM25, hybrid search, rerankers, HTTP service."""
