"""Lexical candidates: BM25 from the postings in Postgres ("sql") or an in-memory copy ("memory").

Both backends return rank-bm25's scores. The in-memory copy (scipy, one per index) answers in 2-6 ms
at 300k chunks where the SQL aggregation over postings takes 150-500 ms; it is reloaded in a
background thread when the index version changes, and filtered queries always use SQL.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
from chunkyard.retrieval.query import feedback
from chunkyard.retrieval.query.fusion import Candidates
from chunkyard.retrieval.query.handles import IndexHandle, IndexHandles
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store import bm25 as bm25_lib
from chunkyard.retrieval.store.indexes import split_index_name
from chunkyard.retrieval.store.published_chunks import chunk_texts

log = logging.getLogger("chunkyard.search")

BACKENDS = ("sql", "memory")


class LexicalCandidates:
    """The BM25 stage of one Searcher: its backend and its in-memory copies."""

    def __init__(self, store: Store, handles: IndexHandles, backend: str) -> None:
        if backend not in BACKENDS:
            raise SearchError(f"bm25_backend: unknown {backend!r}; expected 'sql' or 'memory'")
        self.backend = backend
        self._store = store
        self._handles = handles
        self._memory: dict[str, bm25_lib.MemoryBm25] = {}
        self._reloading: set[str] = set()
        self._lock = threading.Lock()

    def top_k(
        self,
        conn: psycopg.Connection,
        handle: IndexHandle,
        query: str,
        n: int,
        filters: dict[str, Any] | None,
    ) -> Candidates:
        return self.top_k_terms(conn, handle, handle.analyzer.analyze(query), n, filters)

    def top_k_terms(
        self,
        conn: psycopg.Connection,
        handle: IndexHandle,
        terms: list[str],
        n: int,
        filters: dict[str, Any] | None,
    ) -> Candidates:
        """Top `n` chunks for analysed `terms` (a repeated term counts again)."""
        if not terms:
            return []
        if self.backend == "memory" and not filters:
            memory = self._current(handle)
            if memory is not None:
                return memory.top_k(terms, n)
        return bm25_lib.sql_top_k(
            conn, handle.name, handle.postings, handle.chunks, terms, handle.bm25_params, n, filters=filters
        )

    def with_feedback(
        self,
        conn: psycopg.Connection,
        handle: IndexHandle,
        query: str,
        n: int,
        filters: dict[str, Any] | None,
    ) -> Candidates:
        """Top `n` chunks for `query` with pseudo-relevance feedback (`retrieval.query.feedback`)."""
        terms = handle.analyzer.analyze(query)
        first = self.top_k_terms(conn, handle, terms, max(n, feedback.FEEDBACK_CHUNKS), filters)
        if not first:
            return []
        top = [cid for cid, _ in first[: feedback.FEEDBACK_CHUNKS]]
        texts = chunk_texts(conn, handle.chunks, handle.name, top)
        found = [texts[cid] for cid in top if cid in texts]
        candidates = sorted({t for text in found for t in handle.analyzer.analyze(text)} - set(terms))
        idf = self.idf(conn, handle, candidates)
        expansion = feedback.expansion_terms(terms, found, handle.analyzer.analyze, idf)
        if not expansion:
            return first[:n]
        return self.top_k_terms(conn, handle, feedback.feedback_query(terms, expansion), n, filters)

    def idf(self, conn: psycopg.Connection, handle: IndexHandle, terms: list[str]) -> dict[str, float]:
        """Each of `terms`' BM25 idf in `handle`'s index version (the in-memory copy's, else Postgres')."""
        memory = self._current(handle)
        if memory is not None:
            weights = self.term_weights(handle, terms)
            if weights is not None:
                return weights
        with conn.pipeline():
            stats_cursor, df_cursor = bm25_lib.queue_statistics(conn, handle.name, terms)
        stats_row, df_rows = stats_cursor.fetchone(), df_cursor.fetchall()
        if stats_row is None:
            return {}
        stats = bm25_lib.CorpusStats(
            int(stats_row[0]), int(stats_row[1]), int(stats_row[2]), float(stats_row[3])
        )
        return {term: stats.idf(int(df), handle.bm25_params.epsilon) for term, df in df_rows}

    def term_weights(self, handle: IndexHandle, terms: list[str]) -> dict[str, float] | None:
        """Each query term's BM25 idf from the in-memory copy of `handle`'s index (any loaded version),
        or None when none is loaded (highlights then weigh every term alike)."""
        memory = self._memory.get(handle.name)
        if memory is None:
            return None
        epsilon = handle.bm25_params.epsilon
        return {
            t: memory.stats.idf(int(memory.df[memory.term_ids[t]]) if t in memory.term_ids else 0, epsilon)
            for t in set(terms)
        }

    def loaded(self, index: str) -> bm25_lib.MemoryBm25 | None:
        """The in-memory copy of `index` as loaded now (any version), or None."""
        return self._memory.get(split_index_name(index))

    def warm(self, index: str) -> float:
        """Load the in-memory copy of `index` now (seconds taken); e.g. before serving traffic."""
        return self._reload(split_index_name(index))

    def _current(self, handle: IndexHandle) -> bm25_lib.MemoryBm25 | None:
        """The in-memory copy at exactly `handle.version`, or None (the caller then uses SQL).

        A missing or outdated copy is (re)loaded in a background thread, so a publish never
        stalls queries: until the new copy is ready they are answered from the postings in Postgres.
        """
        memory = self._memory.get(handle.name)
        if memory is not None and memory.version == handle.version:
            return memory
        if memory is None or memory.version < handle.version:
            self._start_reload(handle.name)
        return None

    def _start_reload(self, index_name: str) -> None:
        with self._lock:
            if index_name in self._reloading:
                return
            self._reloading.add(index_name)
        thread = threading.Thread(
            target=self._reload_quietly, args=(index_name,), daemon=True, name="bm25-reload"
        )
        thread.start()

    def _reload_quietly(self, index_name: str) -> None:
        """The background reload: a failure (the database stopping as the process exits, say) leaves
        the queries on the postings in Postgres, as before the copy was asked for; no traceback."""
        try:
            self._reload(index_name)
        except Exception as exc:  # a warm-up, never an answer: the SQL path answers meanwhile
            log.info("bm25-reload of %s stopped: %s: %s", index_name, type(exc).__name__, exc)

    def _reload(self, index_name: str) -> float:
        started = time.perf_counter()
        try:
            with self._store.connection() as conn:
                handle = self._handles.get(conn, index_name)
                memory = bm25_lib.MemoryBm25.load(conn, handle.name, handle.bm25_params)
            with self._lock:
                current = self._memory.get(index_name)
                if current is None or current.version < memory.version:
                    self._memory[index_name] = memory
        finally:
            with self._lock:
                self._reloading.discard(index_name)
        return time.perf_counter() - started
