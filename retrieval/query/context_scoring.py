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
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from retrieval import bm25 as bm25_lib
from retrieval.index_defaults import ContextScoring
from retrieval.query.fusion import Ranked, min_max
from retrieval.query.snapshot import IndexHandle


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


@dataclass
class ContextEvidence:
    """A candidate's context: its BM25 score (None in dense mode) and dense cosine (None in bm25 mode).

    `focus`: the candidate's best window score (None when focus scoring is off or the mode is dense).
    """

    bm25: float | None
    dense: float | None
    chunks: int
    focus: float | None = None


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
) -> dict[str, ContextEvidence]:
    """BM25 and/or dense scores of each candidate's context, read inside the caller's snapshot.

    `terms=None` skips BM25 and `query_vector=None` skips the dense score (the mode does not use it).
    With `settings.focus_weight` and an `analyzer`, each candidate's best window is scored too.
    """
    members = {cid: layout.members(cid, settings) for cid in candidates if cid in layout.position}
    if not members:
        return {}
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
    return {
        cid: ContextEvidence(
            bm25=bm25_scores.get(cid, 0.0) if terms is not None else None,
            dense=dense_scores.get(cid) if query_vector is not None else None,
            chunks=len(ids),
            focus=focus_scores.get(cid, 0.0) if use_focus else None,
        )
        for cid, ids in members.items()
    }


def best_window_score(chunk_terms: list[str], weights: dict[str, float], size: int, k1: float) -> float:
    """Highest BM25-style score of any `size` consecutive terms (all windows one length: no length norm)."""
    present = set(chunk_terms)
    query_terms = [t for t in weights if t in present]
    if not query_terms:
        return 0.0
    row_of = {t: i for i, t in enumerate(query_terms)}
    hits = np.zeros((len(query_terms), len(chunk_terms) + 1))
    for position, term in enumerate(chunk_terms):
        row = row_of.get(term)
        if row is not None:
            hits[row, position + 1] = 1.0
    cumulative = np.cumsum(hits, axis=1)
    width = min(size, len(chunk_terms))
    tf = cumulative[:, width:] - cumulative[:, : cumulative.shape[1] - width]
    w = np.array([weights[t] for t in query_terms])[:, None]
    return float((w * tf * (k1 + 1) / (tf + k1)).sum(axis=0).max())


def fuse_with_context(
    mode: str,
    fused: Ranked,
    evidence: dict[str, ContextEvidence],
    settings: ContextScoring,
    *,
    dense_weight: float,
    rrf_k: float,
) -> Ranked:
    """Re-rank fused candidates by `(1 - weight) * own + weight * context`, keeping every score.

    The context score follows the mode: dense cosine, BM25, their weighted mix (`hybrid_weighted`,
    with the mode's dense weight) or their reciprocal rank fusion (`hybrid`).
    """
    own_key = {"dense": "dense", "bm25": "bm25", "hybrid": "rrf", "hybrid_auto": "auto"}.get(mode, "weighted")
    ids = [cid for cid, _ in fused]
    scores = dict(fused)
    context_dense = {cid: evidence[cid].dense for cid in ids if cid in evidence}
    context_bm25 = {cid: evidence[cid].bm25 for cid in ids if cid in evidence}
    for cid in ids:
        if context_dense.get(cid) is not None:
            scores[cid]["context_dense"] = float(context_dense[cid])  # type: ignore[arg-type]
        if context_bm25.get(cid) is not None:
            scores[cid]["context_bm25"] = float(context_bm25[cid])  # type: ignore[arg-type]
    dense_values = {c: v for c, v in context_dense.items() if v is not None}
    bm25_values = {c: v for c, v in context_bm25.items() if v is not None}
    if mode == "dense":
        context = dense_values
    elif mode == "bm25":
        context = bm25_values
    elif mode == "hybrid":
        context = {}
        for values in (dense_values, bm25_values):
            order = sorted(values, key=lambda c: (-values[c], c))
            for rank, cid in enumerate(order, start=1):
                context[cid] = context.get(cid, 0.0) + 1.0 / (rrf_k + rank)
    else:
        dense_norm, bm25_norm = min_max(dense_values), min_max(bm25_values)
        context = {
            cid: dense_weight * dense_norm.get(cid, 0.0) + (1 - dense_weight) * bm25_norm.get(cid, 0.0)
            for cid in ids
        }
    focus = {cid: evidence[cid].focus for cid in ids if cid in evidence and evidence[cid].focus is not None}
    focus_weight = settings.focus_weight if focus else 0.0
    own_norm = min_max({cid: scores[cid].get(own_key, 0.0) for cid in ids})
    context_norm = min_max({cid: context.get(cid, 0.0) for cid in ids})
    focus_norm = min_max({cid: focus.get(cid) or 0.0 for cid in ids}) if focus else {}
    own_weight = 1.0 - settings.weight - focus_weight
    for cid in ids:
        scores[cid]["context"] = float(context.get(cid, 0.0))
        value = own_weight * own_norm[cid] + settings.weight * context_norm[cid]
        if focus:
            scores[cid]["focus"] = float(focus.get(cid) or 0.0)
            value += focus_weight * focus_norm[cid]
        scores[cid]["with_context"] = value
    order = sorted(ids, key=lambda cid: (-scores[cid]["with_context"], cid))
    return [(cid, scores[cid]) for cid in order]


class Layouts:
    """Each index's ChunkLayout at its current version, loaded on first use inside the caller's snapshot."""

    def __init__(self) -> None:
        self._layouts: dict[str, ChunkLayout] = {}
        self._lock = threading.Lock()

    def get(self, conn: psycopg.Connection, handle: IndexHandle) -> ChunkLayout:
        layout = self._layouts.get(handle.name)
        if layout is None or layout.version != handle.version:
            layout = ChunkLayout.load(conn, handle.chunks, handle.version)
            with self._lock:
                self._layouts[handle.name] = layout
        return layout


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
) -> Ranked:
    """The context stage: score the candidates' contexts in the snapshot and re-rank with them."""
    evidence = score_contexts(
        conn,
        index_name=handle.name,
        chunks_partition=handle.chunks,
        postings_partition=handle.postings,
        dim=handle.dim,
        layout=layout,
        settings=settings,
        candidates=[cid for cid, _ in fused],
        terms=handle.analyzer.analyze(query) if mode != "dense" else None,
        bm25_params=handle.bm25_params,
        query_vector=query_vector if mode != "bm25" else None,
        analyzer=handle.analyzer,
    )
    return fuse_with_context(mode, fused, evidence, settings, dense_weight=dense_weight, rrf_k=rrf_k)
