"""The one build-and-evaluate path, shared by the Dagster assets and `chunkyard eval` (no Dagster here).

- `pipeline.documents`: a collection's files, ids and hashes (one rule for the step and the sensor)
- `pipeline.steps`: one module per step (documents, chunks, embeddings, bm25, index, evaluation,
  leaderboard), each returning a `StepReport` with metadata and integrity checks
- `pipeline.graph`: the index steps in order, declared once, and which failed checks stop them
- `pipeline.checks`: the integrity checks (read-only SQL) and their names
- `pipeline.versions`: code versions derived from what each step imports
- `pipeline.benchmark`: `chunkyard eval`
"""
