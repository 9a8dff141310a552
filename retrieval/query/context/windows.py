"""The finer scale: each chunk's best window of `focus_size` terms, and context vector means."""

from __future__ import annotations

import numpy as np


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
