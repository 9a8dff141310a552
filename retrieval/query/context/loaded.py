"""Each index's chunk layout and context statistics at its current version, loaded on first use."""

from __future__ import annotations

import threading

import psycopg
from chunkyard.retrieval.query.context.layout import ChunkLayout
from chunkyard.retrieval.query.context.statistics import ContextStatistics
from chunkyard.retrieval.query.handles import IndexHandle
from chunkyard.retrieval.settings.index_defaults import ContextScoring


class Layouts:
    """Each index's ChunkLayout (and ContextStatistics) at its current version, loaded on first use
    inside the caller's read transaction."""

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
