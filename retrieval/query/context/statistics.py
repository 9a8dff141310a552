"""What context scoring reads about an index version's chunks, loaded once into memory."""

from __future__ import annotations

import threading

import numpy as np
import psycopg
from chunkyard.retrieval.query.context.layout import ChunkLayout
from chunkyard.retrieval.query.context.windows import _window_means
from chunkyard.retrieval.query.handles import IndexHandle
from chunkyard.retrieval.settings.index_defaults import ContextScoring
from chunkyard.retrieval.store import bm25 as bm25_lib
from chunkyard.retrieval.store import published_chunks

# Context means are computed this many chunks at a time (bounds the temporaries on a large index).
MEANS_BLOCK = 4096


class ContextStatistics:
    """What context scoring reads about the chunks of one index version, in layout order, in memory.

    BM25: the corpus totals, every term's document frequency and a (chunks x terms) matrix of raw
    term frequencies; dense: every chunk vector; focus: every chunk's analysed terms as term ids.
    Each part is loaded once, on first use, inside the caller's read transaction of `version` (published
    content never changes within a version), so a query reads no neighbour statistics from the
    database. Memory per chunk: 4 bytes per vector dimension, 16 bytes per posting, 4 per analysed term.
    """

    def __init__(self, handle: IndexHandle, layout: ChunkLayout) -> None:
        self.version = handle.version
        self.layout = layout
        self._handle = handle
        self._lock = threading.Lock()
        self.stats: bm25_lib.CorpusStats | None = None
        self.term_ids: dict[str, int] = {}
        self.df = np.zeros(0, dtype=np.int64)
        self._indptr = np.zeros(1, dtype=np.int64)  # CSC by term: rows (layout positions) and tf
        self._rows = np.zeros(0, dtype=np.int64)
        self._tf_cumulative = np.zeros(1, dtype=np.int64)
        self._vectors: np.ndarray | None = None
        self._focus: tuple[np.ndarray, np.ndarray] | None = None
        self._occurrences: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._means: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._bm25_loaded = False

    def load_bm25(self, conn: psycopg.Connection) -> None:
        """Totals, document frequencies and term frequencies (one binary COPY of the postings)."""
        if self._bm25_loaded:
            return
        with self._lock:
            if self._bm25_loaded:
                return
            handle = self._handle
            self.stats = bm25_lib.load_stats(conn, handle.name)
            terms = bm25_lib.terms_with_df(conn, handle.name)
            self.term_ids = {t: i for i, (t, _) in enumerate(terms)}
            self.df = np.array([int(d) for _, d in terms], dtype=np.int64)
            term_index, rows, tf = bm25_lib.postings_by_position(
                conn, handle.name, handle.postings, handle.chunks
            )
            order = np.lexsort((rows, term_index))
            term_index, rows, tf = term_index[order], rows[order], tf[order]
            self._indptr = np.searchsorted(term_index, np.arange(len(terms) + 1), side="left").astype(
                np.int64
            )
            self._rows = rows
            self._tf_cumulative = np.concatenate([[0], np.cumsum(tf)]).astype(np.int64)
            self._bm25_loaded = True

    def context_tf(self, term: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Summed tf of `term` over the layout positions `[lo, hi)` of each context."""
        j = self.term_ids[term]
        p0, p1 = int(self._indptr[j]), int(self._indptr[j + 1])
        rows = self._rows[p0:p1]
        a = p0 + np.searchsorted(rows, lo, side="left")
        b = p0 + np.searchsorted(rows, hi, side="left")
        return (self._tf_cumulative[b] - self._tf_cumulative[a]).astype(np.float64)

    def vectors(self, conn: psycopg.Connection) -> np.ndarray:
        """Every chunk vector in layout order (float32, one binary COPY)."""
        if self._vectors is None:
            with self._lock:
                if self._vectors is None:
                    dim = int(self._handle.dim)
                    self._vectors = published_chunks.vectors_in_layout_order(conn, self._handle.chunks, dim)
                    if len(self._vectors) != len(self.layout.chunk_ids):
                        raise ValueError("context statistics: chunk vectors do not match the chunk layout")
        return self._vectors

    def context_means(
        self, conn: psycopg.Connection, settings: ContextScoring
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk's context mean vector (float32) and its squared norm (float64), per context shape.

        Computed once per index version and shape, so a query's dense context score is one
        product with the query vector. The means are float64 sums of the members cast to float32
        (pgvector's `avg`), summed in the same order as a query-time sum, so the values are equal.
        """
        key = (settings.span, settings.neighbours)
        cached = self._means.get(key)
        if cached is not None:
            return cached
        vectors = self.vectors(conn)
        with self._lock:
            cached = self._means.get(key)
            if cached is None:
                n = len(vectors)
                means = np.zeros_like(vectors)
                for block in range(0, n, MEANS_BLOCK):  # bounded temporaries on a large index
                    positions = np.arange(block, min(n, block + MEANS_BLOCK))
                    lo, hi = self.layout._bounds(positions, settings)
                    means[positions] = _window_means(vectors, lo, hi)
                wide = means.astype(np.float64)
                cached = (means, (wide * wide).sum(axis=1))
                self._means[key] = cached
        return cached

    def focus_terms(
        self, conn: psycopg.Connection, analyzer: bm25_lib.TermAnalyzer
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk's analysed `embed_text` as term ids (-1: not in the vocabulary) and its offsets."""
        self.load_bm25(conn)
        if self._focus is None:
            with self._lock:
                if self._focus is None:
                    ids: list[int] = []
                    offsets = [0]
                    term_ids = self.term_ids
                    for text in published_chunks.embed_texts_in_layout_order(conn, self._handle.chunks):
                        ids.extend(term_ids.get(term, -1) for term in analyzer.analyze(text))
                        offsets.append(len(ids))
                    self._focus = (np.array(ids, dtype=np.int32), np.array(offsets, dtype=np.int64))
        return self._focus

    def focus_occurrences(
        self, conn: psycopg.Connection, analyzer: bm25_lib.TermAnalyzer
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each term occurs in `focus_terms`' flat array: a CSR by term id (indptr, positions),
        and the chunk (layout position) of every flat position.

        Built once per index version, so a query's window scoring reads only its own terms'
        occurrences instead of every analysed term of every candidate. Memory: 12 bytes per term.
        """
        focus_ids, offsets = self.focus_terms(conn, analyzer)
        if self._occurrences is None:
            with self._lock:
                if self._occurrences is None:
                    known = np.flatnonzero(focus_ids >= 0)
                    order = np.argsort(focus_ids[known], kind="stable")  # by term, then position
                    indptr = np.searchsorted(
                        focus_ids[known][order], np.arange(len(self.term_ids) + 1), side="left"
                    )
                    chunk_of = np.repeat(np.arange(len(offsets) - 1, dtype=np.int32), np.diff(offsets))
                    self._occurrences = (indptr.astype(np.int64), known[order].astype(np.int64), chunk_of)
        return self._occurrences
