"""Where each chunk of an index version sits: its document, its neighbours, its parent group, its copies."""

from __future__ import annotations

import numpy as np
import psycopg
from chunkyard.retrieval.settings.index_defaults import ContextScoring
from chunkyard.retrieval.store.published_chunks import LayoutRow, layout_rows


class ChunkLayout:
    """Every chunk of one published index version in document order (`doc_id`, `start`).

    Loaded once per index version, so a query finds a chunk's neighbours, the chunks sharing its
    parent, or the other copies of its text, without a database round trip. Memory: about 0.4 KB
    per chunk (the id, its position, five integers, the first-copy map).
    """

    def __init__(self, version: int, rows: list[LayoutRow]) -> None:
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
        return cls(version, layout_rows(conn, chunks_partition))

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
