"""Incremental indexing: stage chunks, vectors and term frequencies, then publish in one transaction.

One module per stage (`chunks`, `embeddings`, `bm25`, `publish`), each what one pipeline step calls
(`pipeline.graph` declares the steps and runs them; `pipeline.graph.build_index` runs them all).
Staging lives in Postgres (`staged_*` tables), so the stages can run in different processes;
`publish` applies removals, new chunks, vectors, postings and BM25 statistics in a single
transaction and bumps the index version, so a reader sees the old index or the new one, never a mix.
"""
