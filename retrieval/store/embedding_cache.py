"""Vectors already computed, by model and content hash, so unchanged text is never embedded twice."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from chunkyard.retrieval.store.pool import Pool
from chunkyard.retrieval.store.vectors import as_array


class EmbeddingCache:
    """The `embedding_cache` table, keyed on (model id with its backend, content hash)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def lookup(self, model_id: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Vectors already computed for these content hashes by this model (backend included)."""
        wanted = list(dict.fromkeys(hashes))
        found: dict[str, np.ndarray] = {}
        with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
            for i in range(0, len(wanted), 10000):
                rows = cur.execute(
                    "SELECT content_hash, embedding FROM embedding_cache"
                    " WHERE model_id = %s AND content_hash = ANY(%s)",
                    (model_id, wanted[i : i + 10000]),
                ).fetchall()
                for content_hash, vector in rows:
                    found[content_hash] = as_array(vector)
        return found

    def add(self, model_id: str, vectors: dict[str, np.ndarray]) -> int:
        """Add vectors to the cache (binary COPY into a temp table, then insert the new ones)."""
        if not vectors:
            return 0
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS _cache_load (content_hash text, embedding vector)"
                " ON COMMIT DELETE ROWS"
            )
            with conn.cursor() as cur:
                with cur.copy(
                    "COPY _cache_load (content_hash, embedding) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["text", "vector"])
                    for content_hash, vector in vectors.items():
                        copy.write_row((content_hash, np.asarray(vector, dtype=np.float32)))
                cur.execute(
                    "INSERT INTO embedding_cache (model_id, content_hash, embedding)"
                    " SELECT %s, content_hash, embedding FROM _cache_load"
                    " ON CONFLICT (model_id, content_hash) DO NOTHING",
                    (model_id,),
                )
                return cur.rowcount
