"""Context scoring: rank small chunks with evidence from the text around them (multi-scale retrieval).

A small chunk is a precise answer (little text to read, high IoU), but its own words often miss
part of the question while the passage around it has them. With `context_scoring` in an index
config, every first-stage candidate also gets a score for its *context* (the larger scale) and,
optionally, for its best window of `focus_size` terms (the finer scale), mixed with its own:

    score = (1 - weight - focus_weight) * own + weight * context + focus_weight * focus
            (each min-max normalised over the candidates)

The context of a chunk is the chunk with its `neighbours` chunks on each side in the same
document (`span: neighbours`), or every chunk sharing its hierarchical parent (`span: parent`).
It is scored with the signals of the search mode: BM25 of the context as one text (term
frequencies and lengths summed over its chunks, the index's idf, the mean context length as
avgdl; without chunk overlap this is exactly BM25 of the concatenated span) and the cosine
between the query and the mean of the context's chunk vectors. Nothing new is stored or
embedded: chunk ids, spans and vectors stay those of the index, and returned chunks are still
exact spans; only their order changes. The settings (`ContextScoring`) are in `retrieval.options`.

What the contexts are scored with (term frequencies, document frequencies, vectors, each chunk's
analysed terms) is loaded once per index version (`ContextStatistics`, like the in-memory BM25
copy), so a query sends no statement of its own; `score_contexts` is the per-query SQL twin
(`Searcher(context_backend="sql")`), kept for indexes too large to hold in memory.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from retrieval import bm25 as bm25_lib
from retrieval.index_defaults import ContextScoring
from retrieval.query.fusion import Ranked
from retrieval.query.snapshot import IndexHandle

# Context means are computed this many chunks at a time (bounds the temporaries on a large index).
MEANS_BLOCK = 4096


class ChunkLayout:
    """Every chunk of one published index version in document order (`doc_id`, `start`).

    Loaded once per index version, so a query finds a chunk's neighbours, the chunks sharing its
    parent, or the other copies of its text, without a database round trip. Memory: about 0.4 KB
    per chunk (the id, its position, five integers, the first-copy map).
    """

    def __init__(self, version: int, rows: list[tuple[str, str, int, int, str, int]]) -> None:
        self.version = version
        self.chunk_ids = [r[0] for r in rows]
        self.position = {cid: i for i, cid in enumerate(self.chunk_ids)}
        self.lengths = np.array([r[3] for r in rows], dtype=np.float64)
        n = len(rows)
        self.doc_start = np.zeros(n, dtype=np.int64)
        self.doc_end = np.zeros(n, dtype=np.int64)
        self.group_start = np.zeros(n, dtype=np.int64)
        self.group_end = np.zeros(n, dtype=np.int64)
        for starts, ends, key in (
            (self.doc_start, self.doc_end, lambda r: r[1]),
            (self.group_start, self.group_end, lambda r: (r[1], r[4] or r[0])),
        ):
            run_start = 0
            for i in range(1, n + 1):
                if i == n or key(rows[i]) != key(rows[run_start]):
                    starts[run_start:i] = run_start
                    ends[run_start:i] = i
                    run_start = i
        self._cumulative = np.concatenate([[0.0], np.cumsum(self.lengths)])
        self._mean_length: dict[tuple[str, int], float] = {}
        self.text_keys = np.array([r[5] for r in rows], dtype=np.int64)
        self._first_copy: dict[tuple[int, int], int] = {}
        for i in range(n):
            self._first_copy.setdefault((int(self.doc_start[i]), int(self.text_keys[i])), i)

    @classmethod
    def load(cls, conn: psycopg.Connection, chunks_partition: str, version: int) -> ChunkLayout:
        rows = conn.execute(
            sql.SQL(
                "SELECT chunk_id, doc_id, start, bm25_length, coalesce(parent_id, ''),"
                " ('x' || left(md5(text), 16))::bit(64)::bigint FROM {} ORDER BY doc_id, start, chunk_id"
            ).format(sql.Identifier(chunks_partition))
        ).fetchall()
        return cls(version, rows)

    def _bounds(self, positions: np.ndarray, settings: ContextScoring) -> tuple[np.ndarray, np.ndarray]:
        if settings.span == "parent":
            return self.group_start[positions], self.group_end[positions]
        n = settings.neighbours
        return (
            np.maximum(self.doc_start[positions], positions - n),
            np.minimum(self.doc_end[positions], positions + n + 1),
        )

    def members(self, chunk_id: str, settings: ContextScoring) -> list[str]:
        """The chunk ids forming `chunk_id`'s context, in document order (the chunk included)."""
        pos = np.array([self.position[chunk_id]])
        lo, hi = self._bounds(pos, settings)
        return self.chunk_ids[int(lo[0]) : int(hi[0])]

    def context_length(self, chunk_id: str, settings: ContextScoring) -> float:
        lo, hi = self._bounds(np.array([self.position[chunk_id]]), settings)
        return float(self._cumulative[hi[0]] - self._cumulative[lo[0]])

    def text_key(self, chunk_id: str) -> int:
        """64 bits of the md5 of the chunk's text: equal for identical texts."""
        return int(self.text_keys[self.position[chunk_id]])

    def earliest_copy(self, chunk_id: str) -> str:
        """The first chunk in document order, in the same document, whose text equals this one's."""
        pos = self.position[chunk_id]
        return self.chunk_ids[self._first_copy[(int(self.doc_start[pos]), int(self.text_keys[pos]))]]

    def mean_context_length(self, settings: ContextScoring) -> float:
        """avgdl for context BM25: the mean BM25 length of every chunk's context."""
        key = (settings.span, settings.neighbours)
        if key not in self._mean_length:
            if not self.chunk_ids:
                self._mean_length[key] = 0.0
            else:
                lo, hi = self._bounds(np.arange(len(self.chunk_ids)), settings)
                self._mean_length[key] = float(np.mean(self._cumulative[hi] - self._cumulative[lo]))
        return self._mean_length[key]


class ContextStatistics:
    """What context scoring reads about the chunks of one index version, in layout order, in memory.

    BM25: the corpus totals, every term's document frequency and a (chunks x terms) matrix of raw
    term frequencies; dense: every chunk vector; focus: every chunk's analysed terms as term ids.
    Each part is loaded once, on first use, inside the caller's snapshot of `version` (published
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

    def _layout_order(self) -> sql.Composable:
        return sql.SQL("ORDER BY doc_id, start, chunk_id")  # ChunkLayout.load's order

    def load_bm25(self, conn: psycopg.Connection) -> None:
        """Totals, document frequencies and term frequencies (one binary COPY of the postings)."""
        if self._bm25_loaded:
            return
        with self._lock:
            if self._bm25_loaded:
                return
            handle = self._handle
            self.stats = bm25_lib.load_stats(conn, handle.name)
            terms = conn.execute(
                "SELECT term, df FROM bm25_terms WHERE index_name = %s ORDER BY term", (handle.name,)
            ).fetchall()
            self.term_ids = {t: i for i, (t, _) in enumerate(terms)}
            self.df = np.array([int(d) for _, d in terms], dtype=np.int64)
            query = sql.SQL(
                "COPY (SELECT t.ti::int4, c.ci::int4, p.tf FROM {postings} p"
                " JOIN (SELECT chunk_id, row_number() OVER ({order}) - 1 AS ci FROM {chunks}) c"
                " ON c.chunk_id = p.chunk_id"
                " JOIN (SELECT term, row_number() OVER (ORDER BY term) - 1 AS ti FROM bm25_terms"
                " WHERE index_name = {name}) t ON t.term = p.term) TO STDOUT (FORMAT BINARY)"
            ).format(
                postings=sql.Identifier(handle.postings),
                chunks=sql.Identifier(handle.chunks),
                order=self._layout_order(),
                name=sql.Literal(str(handle.name)),
            )
            records = bm25_lib.binary_copy_int4_rows(_copy_bytes(conn, query), 3)
            term_index, rows, tf = (records[f"v{i}"].astype(np.int64) for i in range(3))
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
                    query = sql.SQL(
                        "COPY (SELECT embedding::vector({dim}) FROM {chunks} {order}) TO STDOUT (FORMAT BINARY)"
                    ).format(
                        dim=sql.Literal(dim),
                        chunks=sql.Identifier(self._handle.chunks),
                        order=self._layout_order(),
                    )
                    self._vectors = _binary_copy_vectors(_copy_bytes(conn, query), dim)
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
        self, conn: psycopg.Connection, analyzer: bm25_lib.Analyzer
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk's analysed `embed_text` as term ids (-1: not in the vocabulary) and its offsets."""
        self.load_bm25(conn)
        if self._focus is None:
            with self._lock:
                if self._focus is None:
                    ids: list[int] = []
                    offsets = [0]
                    term_ids = self.term_ids
                    query = sql.SQL("SELECT embed_text FROM {} {}").format(
                        sql.Identifier(self._handle.chunks), self._layout_order()
                    )
                    for (text,) in conn.execute(query):
                        ids.extend(term_ids.get(term, -1) for term in analyzer.analyze(text))
                        offsets.append(len(ids))
                    self._focus = (np.array(ids, dtype=np.int32), np.array(offsets, dtype=np.int64))
        return self._focus

    def focus_occurrences(
        self, conn: psycopg.Connection, analyzer: bm25_lib.Analyzer
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


def _copy_bytes(conn: psycopg.Connection, query: sql.Composable) -> bytes:
    buffer = bytearray()
    with conn.cursor() as cur, cur.copy(query) as copy:
        for block in copy:
            buffer += block
    return bytes(buffer)


def _binary_copy_vectors(data: bytes, dim: int) -> np.ndarray:
    """Parse binary COPY output of one non-null pgvector `vector(dim)` column into an (n x dim) array."""
    if not data.startswith(b"PGCOPY\n\xff\r\n\x00"):
        raise ValueError("not a Postgres binary COPY stream")
    extension = int.from_bytes(data[15:19], "big")
    body = data[19 + extension : len(data) - 2]
    fields = [("count", ">i2"), ("len", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("x", ">f4", (dim,))]
    records = np.frombuffer(body, dtype=np.dtype(fields))
    if records.size and (np.any(records["count"] != 1) or np.any(records["dim"] != dim)):
        raise ValueError("unexpected row layout in binary COPY stream (a chunk without a vector?)")
    return records["x"].astype(np.float32)


@dataclass
class ContextEvidence:
    """The candidates' contexts, one value per candidate in the caller's order (NaN: not scored).

    `bm25`: context BM25 (None in dense mode); `dense`: the cosine with the context's mean vector
    (None in bm25 mode); `focus`: the best window score (None when focus scoring is off or the mode
    is dense). Arrays, so re-ranking the candidates is a few vector operations, not a loop.
    """

    bm25: np.ndarray | None
    dense: np.ndarray | None
    focus: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        candidates: list[str],
        bm25: dict[str, float] | None,
        dense: dict[str, float] | None,
        focus: dict[str, float] | None,
    ) -> ContextEvidence:
        """From per-candidate scores (a candidate missing from a dict was not scored)."""

        def aligned(values: dict[str, float] | None) -> np.ndarray | None:
            if values is None:
                return None
            return np.array([values.get(cid, np.nan) for cid in candidates], dtype=np.float64)

        return cls(aligned(bm25), aligned(dense), aligned(focus))


def score_contexts(
    conn: psycopg.Connection,
    *,
    index_name: str,
    chunks_partition: str,
    postings_partition: str,
    dim: int,
    layout: ChunkLayout,
    settings: ContextScoring,
    candidates: list[str],
    terms: list[str] | None,
    bm25_params: bm25_lib.Bm25Params,
    query_vector: np.ndarray | None,
    analyzer: bm25_lib.Analyzer | None = None,
) -> ContextEvidence:
    """BM25 and/or dense scores of each candidate's context, read inside the caller's snapshot.

    `terms=None` skips BM25 and `query_vector=None` skips the dense score (the mode does not use it).
    With `settings.focus_weight` and an `analyzer`, each candidate's best window is scored too.
    """
    members = {cid: layout.members(cid, settings) for cid in candidates if cid in layout.position}
    if not members:
        return ContextEvidence(None, None)
    all_members = sorted({m for ids in members.values() for m in ids})
    bm25_scores: dict[str, float] = {}
    dense_scores: dict[str, float] = {}
    focus_scores: dict[str, float] = {}
    counts = Counter(terms or [])
    use_focus = settings.focus_weight > 0.0 and analyzer is not None and terms is not None
    with conn.pipeline():
        stats_cursor = df_cursor = tf_cursor = dense_cursor = text_cursor = None
        if use_focus and counts:
            text_cursor = conn.execute(
                sql.SQL(
                    "SELECT chunk_id, embed_text FROM {} WHERE index_name = %s AND chunk_id = ANY(%s)"
                ).format(sql.Identifier(chunks_partition)),
                (index_name, list(members)),
            )
        if terms is not None and counts:
            stats_cursor, df_cursor = bm25_lib.queue_statistics(conn, index_name, list(counts))
            tf_cursor = conn.execute(
                sql.SQL(
                    "SELECT chunk_id, term, tf FROM {} WHERE index_name = %s AND term = ANY(%s)"
                    " AND chunk_id = ANY(%s)"
                ).format(sql.Identifier(postings_partition)),
                (index_name, list(counts), all_members),
            )
        if query_vector is not None:
            anchors = [cid for cid, ids in members.items() for _ in ids]
            member_ids = [m for ids in members.values() for m in ids]
            vector_type = sql.SQL("vector({})").format(sql.Literal(int(dim)))
            dense_cursor = conn.execute(
                sql.SQL(
                    "SELECT a.anchor, 1 - (avg(c.embedding::{t}) <=> %s::{t}) FROM"
                    " unnest(%s::text[], %s::text[]) AS a(anchor, member)"
                    " JOIN {part} c ON c.index_name = %s AND c.chunk_id = a.member GROUP BY a.anchor"
                ).format(t=vector_type, part=sql.Identifier(chunks_partition)),
                (np.asarray(query_vector, dtype=np.float32), anchors, member_ids, index_name),
            )
    if stats_cursor is not None and df_cursor is not None and tf_cursor is not None:
        stats_row = stats_cursor.fetchone()
        df_rows = df_cursor.fetchall()
        tf_rows = tf_cursor.fetchall()
        if stats_row is not None and int(stats_row[0]) > 0:
            stats = bm25_lib.CorpusStats(
                int(stats_row[0]), int(stats_row[1]), int(stats_row[2]), float(stats_row[3])
            )
            weights = {t: counts[t] * stats.idf(int(df), bm25_params.epsilon) for t, df in df_rows}
            tf_by_chunk: dict[str, dict[str, int]] = {}
            for chunk_id, term, tf in tf_rows:
                tf_by_chunk.setdefault(chunk_id, {})[term] = int(tf)
            avg_length = layout.mean_context_length(settings) or 1.0
            k1, b = bm25_params.k1, bm25_params.b
            for cid, ids in members.items():
                length = layout.context_length(cid, settings)
                norm = k1 * (1 - b + b * length / avg_length)
                tf_context: Counter[str] = Counter()
                for m in ids:
                    tf_context.update(tf_by_chunk.get(m, {}))
                bm25_scores[cid] = float(
                    sum(w * tf_context[t] * (k1 + 1) / (tf_context[t] + norm) for t, w in weights.items())
                )
            if text_cursor is not None and weights and analyzer is not None:
                for cid, text in text_cursor.fetchall():
                    focus_scores[cid] = best_window_score(
                        analyzer.analyze(text), weights, settings.focus_size, k1
                    )
    if dense_cursor is not None:
        dense_scores = {anchor: float(value) for anchor, value in dense_cursor.fetchall()}
    return ContextEvidence.of(
        candidates,
        {cid: bm25_scores.get(cid, 0.0) for cid in members} if terms is not None else None,
        dense_scores if query_vector is not None else None,
        {cid: focus_scores.get(cid, 0.0) for cid in members} if use_focus else None,
    )


def score_contexts_in_memory(
    conn: psycopg.Connection,
    statistics: ContextStatistics,
    *,
    settings: ContextScoring,
    candidates: list[str],
    terms: list[str] | None,
    bm25_params: bm25_lib.Bm25Params,
    query_vector: np.ndarray | None,
    analyzer: bm25_lib.Analyzer | None = None,
) -> ContextEvidence:
    """`score_contexts` from the index version's `ContextStatistics`: the same scores, no query sent.

    `conn` (the caller's snapshot) is only used to load a part of the statistics on its first use.
    """
    layout = statistics.layout
    where = layout.position
    found = [k for k, cid in enumerate(candidates) if cid in where]
    if not found:
        return ContextEvidence(None, None)
    ids = candidates if len(found) == len(candidates) else [candidates[k] for k in found]
    positions = np.array([where[cid] for cid in ids], dtype=np.int64)
    lo, hi = layout._bounds(positions, settings)
    counts = Counter(terms or [])
    use_focus = settings.focus_weight > 0.0 and analyzer is not None and terms is not None
    bm25_scores = np.zeros(len(ids))
    focus_scores = np.zeros(len(ids))
    if terms is not None and counts:
        statistics.load_bm25(conn)
        stats = statistics.stats
        if stats is not None and stats.n_docs > 0:
            weights = {
                t: counts[t] * stats.idf(int(statistics.df[statistics.term_ids[t]]), bm25_params.epsilon)
                for t in sorted(counts)
                if t in statistics.term_ids
            }
            avg_length = layout.mean_context_length(settings) or 1.0
            k1, b = bm25_params.k1, bm25_params.b
            lengths = layout._cumulative[hi] - layout._cumulative[lo]
            norm = k1 * (1 - b + b * lengths / avg_length)
            for t, w in weights.items():
                tf = statistics.context_tf(t, lo, hi)
                bm25_scores += w * tf * (k1 + 1) / (tf + norm)
            if use_focus and weights and analyzer is not None:
                focus_ids, offsets = statistics.focus_terms(conn, analyzer)
                term_ids = np.array([statistics.term_ids[t] for t in weights], dtype=np.int64)
                w = np.array(list(weights.values()))
                if np.all(w >= 0):
                    indptr, occurrences, chunk_of = statistics.focus_occurrences(conn, analyzer)
                    focus_scores = _best_windows_at_hits(
                        indptr,
                        occurrences,
                        chunk_of,
                        offsets,
                        positions,
                        term_ids,
                        w,
                        settings.focus_size,
                        k1,
                    )
                else:  # a negative idf: a window may do better by dropping a hit, so score them all
                    focus_scores = _best_windows(
                        focus_ids, offsets, positions, term_ids, w, settings.focus_size, k1
                    )
    dense_scores: np.ndarray | None = None
    if query_vector is not None:
        all_means, all_norms = statistics.context_means(conn, settings)  # norms squared
        means = all_means[positions].astype(np.float64)
        q = np.asarray(query_vector, dtype=np.float32).astype(np.float64)
        cosine = (means @ q) / np.sqrt(all_norms[positions] * float(q @ q))
        dense_scores = 1.0 - (1.0 - np.clip(cosine, -1.0, 1.0))  # as `1 - (a <=> b)`

    def aligned(values: np.ndarray | None) -> np.ndarray | None:
        if values is None or len(found) == len(candidates):
            return values
        out = np.full(len(candidates), np.nan)
        out[found] = values
        return out

    return ContextEvidence(
        aligned(bm25_scores if terms is not None else None),
        aligned(dense_scores),
        aligned(focus_scores if use_focus else None),
    )


def _window_means(vectors: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The float32 mean of `vectors[lo:hi]` for each pair, as pgvector's `avg` (float8 sums)."""
    sizes = hi - lo
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    members = np.repeat(lo - starts, sizes) + np.arange(int(sizes.sum()))
    sums = np.add.reduceat(vectors[members].astype(np.float64), starts, axis=0)
    return (sums / sizes[:, None]).astype(np.float32)


def _best_windows(
    focus_ids: np.ndarray,
    offsets: np.ndarray,
    positions: np.ndarray,
    term_ids: np.ndarray,
    w: np.ndarray,
    size: int,
    k1: float,
) -> np.ndarray:
    """`best_window_score` of the chunks at `positions` at once, from their analysed term ids.

    Every window of every chunk is scored in one array; a query term absent from a chunk adds
    exact zeros, so each value equals `best_window_score` of that chunk.
    """
    starts, ends = offsets[positions], offsets[positions + 1]
    lengths = ends - starts
    out = np.zeros(len(positions))
    keep = np.flatnonzero(lengths > 0)
    if keep.size == 0:
        return out
    starts, lengths = starts[keep], lengths[keep]
    # the chunks' terms one after another, as rows of `w` (-1: not a query term)
    seg_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    flat = np.repeat(starts - seg_starts, lengths) + np.arange(int(lengths.sum()))
    terms = focus_ids[flat].astype(np.int64)
    order = np.argsort(term_ids, kind="stable")
    found = np.searchsorted(term_ids[order], terms).clip(max=len(term_ids) - 1)
    rows = np.where(term_ids[order][found] == terms, order[found], -1)
    hits = np.zeros((len(w), len(rows)))
    at = np.flatnonzero(rows >= 0)
    hits[rows[at], at] = 1.0
    cumulative = np.concatenate([np.zeros((len(w), 1)), np.cumsum(hits, axis=1)], axis=1)
    widths = np.minimum(size, lengths)
    n_windows = lengths - widths + 1
    window_seg = np.repeat(np.arange(len(keep)), n_windows)
    first_window = np.concatenate([[0], np.cumsum(n_windows)[:-1]])
    window_start = seg_starts[window_seg] + np.arange(int(n_windows.sum())) - first_window[window_seg]
    tf = cumulative[:, window_start + widths[window_seg]] - cumulative[:, window_start]
    scores = (w[:, None] * tf * (k1 + 1) / (tf + k1)).sum(axis=0)
    out[keep] = np.maximum.reduceat(scores, first_window)
    return out


def _best_windows_at_hits(
    indptr: np.ndarray,
    occurrences: np.ndarray,
    chunk_of: np.ndarray,
    offsets: np.ndarray,
    positions: np.ndarray,
    term_ids: np.ndarray,
    w: np.ndarray,
    size: int,
    k1: float,
) -> np.ndarray:
    """`_best_windows` from the query terms' occurrences alone (`focus_occurrences`), for `w >= 0`.

    With no negative weight a window's score never drops when it slides right onto its first hit
    (or up to the chunk's last window), so some window starting there is a best one: only those
    windows, one per hit, are scored, with the same per-term values summed in the same order, so
    each value equals `_best_windows`'.
    """
    out = np.zeros(len(positions))
    if len(positions) == 0 or len(term_ids) == 0:
        return out
    slot = np.full(len(offsets) - 1, -1, dtype=np.int64)  # chunk -> its candidate index
    slot[positions] = np.arange(len(positions))
    counts = indptr[term_ids + 1] - indptr[term_ids]
    found = np.concatenate([occurrences[indptr[j] : indptr[j + 1]] for j in term_ids.tolist()])
    row = np.repeat(np.arange(len(term_ids)), counts)
    keep = slot[chunk_of[found]] >= 0  # hits inside candidate chunks, by term then position
    found, row = found[keep], row[keep]
    if found.size == 0:
        return out
    chunk = chunk_of[found]
    lengths = offsets[chunk + 1] - offsets[chunk]
    starts = np.unique(np.minimum(found, offsets[chunk + 1] - np.minimum(size, lengths)))
    window_chunk = chunk_of[starts]  # starts are sorted, so windows are grouped by chunk
    ends = starts + np.minimum(size, offsets[window_chunk + 1] - offsets[window_chunk])
    # each hit keyed by (term, position), ascending: a window's tf per term is one searchsorted pair
    stride = int(offsets[-1]) + 1
    keys = row * stride + found
    base = np.arange(len(term_ids)) * stride
    tf = np.searchsorted(keys, base[None, :] + ends[:, None]) - np.searchsorted(
        keys, base[None, :] + starts[:, None]
    )
    # (windows x terms), each window's terms contiguous: summed pairwise as `_best_windows`' columns
    scores = (w[None, :] * tf * (k1 + 1) / (tf + k1)).sum(axis=1)
    group = np.flatnonzero(np.concatenate(([True], window_chunk[1:] != window_chunk[:-1])))
    out[slot[window_chunk[group]]] = np.maximum.reduceat(scores, group)
    return out


def best_window_score(chunk_terms: list[str], weights: dict[str, float], size: int, k1: float) -> float:
    """Highest BM25-style score of any `size` consecutive terms (all windows one length: no length norm)."""
    present = set(chunk_terms)
    query_terms = [t for t in weights if t in present]
    if not query_terms:
        return 0.0
    row_of = {t: i for i, t in enumerate(query_terms)}
    rows = np.array([row_of.get(term, -1) for term in chunk_terms], dtype=np.int64)
    return _best_window(rows, np.array([weights[t] for t in query_terms]), size, k1)


def _best_window(rows: np.ndarray, w: np.ndarray, size: int, k1: float) -> float:
    """`best_window_score` on a chunk's terms as rows of `w` (the query terms present; -1: any other term)."""
    hits = np.zeros((len(w), len(rows) + 1))
    positions = np.flatnonzero(rows >= 0)
    hits[rows[positions], positions + 1] = 1.0
    cumulative = np.cumsum(hits, axis=1)
    width = min(size, len(rows))
    tf = cumulative[:, width:] - cumulative[:, : cumulative.shape[1] - width]
    return float((w[:, None] * tf * (k1 + 1) / (tf + k1)).sum(axis=0).max())


def fuse_with_context(
    mode: str,
    fused: Ranked,
    evidence: ContextEvidence,
    settings: ContextScoring,
    *,
    dense_weight: float,
    rrf_k: float,
) -> Ranked:
    """Re-rank fused candidates by `(1 - weight) * own + weight * context`, keeping every score.

    The context score follows the mode: dense cosine, BM25, their weighted mix (`hybrid_weighted`,
    with the mode's dense weight) or their reciprocal rank fusion (`hybrid`). `evidence` is aligned
    with `fused`; each step is the same float operation per candidate as a loop would do.
    """
    own_key = {"dense": "dense", "bm25": "bm25", "hybrid": "rrf", "hybrid_auto": "auto"}.get(mode, "weighted")
    ids = [cid for cid, _ in fused]
    entries = [scores for _, scores in fused]
    n = len(ids)
    dense, has_dense = _scored(evidence.dense, n)
    bm25, has_bm25 = _scored(evidence.bm25, n)
    focus, has_focus = _scored(evidence.focus, n)
    if mode == "dense":
        context = np.where(has_dense, dense, 0.0)
    elif mode == "bm25":
        context = np.where(has_bm25, bm25, 0.0)
    elif mode == "hybrid":
        context = np.zeros(n)
        for values, scored in ((dense, has_dense), (bm25, has_bm25)):
            order = sorted(np.flatnonzero(scored).tolist(), key=lambda k: (-values[k], ids[k]))
            context[order] += 1.0 / (rrf_k + np.arange(1, len(order) + 1))
    else:
        context = dense_weight * _min_max(dense, has_dense) + (1 - dense_weight) * _min_max(bm25, has_bm25)
    with_focus = bool(has_focus.any())
    focus_weight = settings.focus_weight if with_focus else 0.0
    everyone = np.ones(n, dtype=bool)
    own = np.array([scores.get(own_key, 0.0) for scores in entries], dtype=np.float64)
    own_weight = 1.0 - settings.weight - focus_weight
    value = own_weight * _min_max(own, everyone) + settings.weight * _min_max(context, everyone)
    focus = np.where(has_focus, focus, 0.0)
    if with_focus:
        value += focus_weight * _min_max(focus, everyone)
    columns = [dense.tolist(), has_dense.tolist(), bm25.tolist(), has_bm25.tolist(), context.tolist()]
    focus_list, value_list = focus.tolist(), value.tolist()
    for k, (d, has_d, b, has_b, c) in enumerate(zip(*columns, strict=True)):
        scores = entries[k]
        if has_d:
            scores["context_dense"] = d
        if has_b:
            scores["context_bm25"] = b
        scores["context"] = c
        if with_focus:
            scores["focus"] = focus_list[k]
        scores["with_context"] = value_list[k]
    order = sorted(range(n), key=lambda k: (-value_list[k], ids[k]))
    return [fused[k] for k in order]


def _scored(values: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`values` (NaN: not scored) as an array and its mask of scored candidates; None: none scored."""
    if values is None:
        return np.zeros(n), np.zeros(n, dtype=bool)
    return values, ~np.isnan(values)


def _min_max(values: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """`fusion.min_max` over the scored values (1.0 when they are equal); 0.0 for the others."""
    out = np.zeros(len(values))
    if not scored.any():
        return out
    present = values[scored]
    low, high = float(present.min()), float(present.max())
    out[scored] = 1.0 if math.isclose(high, low) else (present - low) / (high - low)
    return out


class Layouts:
    """Each index's ChunkLayout (and ContextStatistics) at its current version, loaded on first use
    inside the caller's snapshot."""

    def __init__(self) -> None:
        self._layouts: dict[str, ChunkLayout] = {}
        self._statistics: dict[str, ContextStatistics] = {}
        self._lock = threading.Lock()

    def get(self, conn: psycopg.Connection, handle: IndexHandle) -> ChunkLayout:
        layout = self._layouts.get(handle.name)
        if layout is None or layout.version != handle.version:
            layout = ChunkLayout.load(conn, handle.chunks, handle.version)
            with self._lock:
                self._layouts[handle.name] = layout
        return layout

    def statistics(self, conn: psycopg.Connection, handle: IndexHandle) -> ContextStatistics:
        """The index's ContextStatistics at `handle.version` (its parts load when first used)."""
        statistics = self._statistics.get(handle.name)
        if statistics is None or statistics.version != handle.version:
            statistics = ContextStatistics(handle, self.get(conn, handle))
            with self._lock:
                self._statistics[handle.name] = statistics
        return statistics

    def warm(self, conn: psycopg.Connection, handle: IndexHandle, settings: ContextScoring) -> None:
        """Load every part of the statistics that context scoring with `settings` reads, now."""
        statistics = self.statistics(conn, handle)
        statistics.load_bm25(conn)
        statistics.vectors(conn)
        if settings.focus_weight > 0.0:
            statistics.focus_terms(conn, handle.analyzer)


def rank_with_context(
    conn: psycopg.Connection,
    handle: IndexHandle,
    layout: ChunkLayout,
    mode: str,
    fused: Ranked,
    settings: ContextScoring,
    query: str,
    query_vector: np.ndarray | None,
    *,
    dense_weight: float,
    rrf_k: float,
    statistics: ContextStatistics | None = None,
) -> Ranked:
    """The context stage: score the candidates' contexts and re-rank with them.

    With `statistics` (the index version's, in memory) no query is sent; without, the postings,
    term statistics and vectors are read in the caller's snapshot (`score_contexts`).
    """
    terms = handle.analyzer.analyze(query) if mode != "dense" else None
    vector = query_vector if mode != "bm25" else None
    candidates = [cid for cid, _ in fused]
    if statistics is not None:
        evidence = score_contexts_in_memory(
            conn,
            statistics,
            settings=settings,
            candidates=candidates,
            terms=terms,
            bm25_params=handle.bm25_params,
            query_vector=vector,
            analyzer=handle.analyzer,
        )
    else:
        evidence = score_contexts(
            conn,
            index_name=handle.name,
            chunks_partition=handle.chunks,
            postings_partition=handle.postings,
            dim=handle.dim,
            layout=layout,
            settings=settings,
            candidates=candidates,
            terms=terms,
            bm25_params=handle.bm25_params,
            query_vector=vector,
            analyzer=handle.analyzer,
        )
    return fuse_with_context(mode, fused, evidence, settings, dense_weight=dense_weight, rrf_k=rrf_k)
