"""The one build-and-evaluate path, shared by the Dagster assets and `chunkyard eval` (no Dagster here).

- `pipeline.documents`: a collection's files, ids and hashes (one rule for the step and the sensor)
- `pipeline.steps`: one module per step (documents, chunks, embeddings, bm25, publish, evaluation,
  leaderboard, promotion), each returning a `StepReport` and declaring its `CODE_VERSION`
- `pipeline.graph`: the step table (`INDEX_STEPS`, each index step declared once) and its one runner
- `pipeline.checks`: the integrity checks (read-only SQL) and their names
- `pipeline.versions`: code versions from the settings and the versions the code declares
- `pipeline.benchmark`: `chunkyard eval`
"""
