"""Per-candidate context and focus evidence, from SQL (`score_contexts`) or from memory."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import psycopg
from chunkyard.retrieval.query.context.layout import ChunkLayout
from chunkyard.retrieval.query.context.statistics import ContextStatistics
from chunkyard.retrieval.query.context.windows import _best_windows, _best_windows_at_hits, best_window_score
from chunkyard.retrieval.query.handles import IndexHandle
from chunkyard.retrieval.settings.index_defaults import ContextScoring
from chunkyard.retrieval.store import bm25 as bm25_lib
from chunkyard.retrieval.store import published_chunks


@dataclass(frozen=True)
class ContextQuery:
    """What the context stage scores one query with: the settings, the query's analysed terms (None:
    the mode reads no BM25) and its vector (None: the mode reads no dense score)."""

    settings: ContextScoring
    terms: list[str] | None
    vector: np.ndarray | None


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
    handle: IndexHandle,
    layout: ChunkLayout,
    query: ContextQuery,
    candidates: list[str],
) -> ContextEvidence:
    """BM25 and/or dense scores of each candidate's context, read inside the caller's read transaction.

    `query.terms=None` skips BM25 and `query.vector=None` skips the dense score (the mode does not
    use it). With `settings.focus_weight`, each candidate's best window is scored too.
    """
    settings, terms, query_vector = query.settings, query.terms, query.vector
    index_name, chunks_partition, postings_partition = handle.name, handle.chunks, handle.postings
    bm25_params, analyzer = handle.bm25_params, handle.analyzer
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
            text_cursor = published_chunks.queue_embed_texts(
                conn, index_name, chunks_partition, list(members)
            )
        if terms is not None and counts:
            stats_cursor, df_cursor = bm25_lib.queue_statistics(conn, index_name, list(counts))
            tf_cursor = bm25_lib.queue_term_frequencies(
                conn, index_name, postings_partition, list(counts), all_members
            )
        if query_vector is not None:
            anchors = [cid for cid, ids in members.items() for _ in ids]
            member_ids = [m for ids in members.values() for m in ids]
            dense_cursor = published_chunks.queue_context_cosines(
                conn, index_name, chunks_partition, handle.dim, query_vector, anchors, member_ids
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
    handle: IndexHandle,
    statistics: ContextStatistics,
    query: ContextQuery,
    candidates: list[str],
) -> ContextEvidence:
    """`score_contexts` from the index version's `ContextStatistics`: the same scores, no query sent.

    `conn` (the caller's read transaction) is only used to load a part of the statistics on its first use.
    """
    settings, terms, query_vector = query.settings, query.terms, query.vector
    bm25_params, analyzer = handle.bm25_params, handle.analyzer
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
