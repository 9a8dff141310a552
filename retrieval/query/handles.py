"""The published state of an index (`IndexHandle`) and the read transaction every query runs in.

Every query reads inside one REPEATABLE READ transaction, so dense and BM25 candidates come from the
same index version even while a publish commits. The read transaction's BEGIN rides with the index lookup
and its COMMIT with the row fetch (see `rows.fetch_rows`), so it costs no extra round trip.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from chunkyard.retrieval.query.results import NOTHING_INDEXED, IndexNotFoundError
from chunkyard.retrieval.settings.index_defaults import ContextConfigError, IndexDefaults
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.store import bm25 as bm25_lib
from chunkyard.retrieval.store import indexes
from chunkyard.retrieval.store.indexes import partition_names, split_index_name
from chunkyard.retrieval.store.published_chunks import abandon, begin_read


@dataclass(frozen=True)
class IndexHandle:
    """One published index version: its partitions, BM25 settings and parsed search defaults."""

    name: IndexName
    version: int
    dim: int
    config: dict[str, Any]
    chunks: str
    postings: str
    bm25_params: bm25_lib.Bm25Params
    analyzer: bm25_lib.TermAnalyzer  # queries: every analyzer the documents were analysed with
    defaults: IndexDefaults
    label: IndexName  # what results name: a snapshot (`c/x@v3`) answers as its live index at version 3
    vector_storage: str = "vector"  # the type its HNSW graph is built on (`vector` or `halfvec`)
    chunks_total: int = 0  # chunks in this version (its BM25 statistics' N)


class IndexHandles:
    """Handles by index name, rebuilt only when the published version or config changes."""

    def __init__(self) -> None:
        self._handles: dict[str, IndexHandle] = {}
        self._lock = threading.Lock()

    def get(self, conn: psycopg.Connection, index: str, *, begin: bool = False) -> IndexHandle:
        """The index's published state; with `begin`, the read transaction's BEGIN rides in the same round trip."""
        name = split_index_name(index)
        try:
            with conn.pipeline():
                if begin:
                    begin_read(
                        conn
                    )  # the read lock before the snapshot: a partition swap lands before or after it
                cursor = indexes.queue_published_state(conn, name)
            row = cursor.fetchone()
        except psycopg.errors.UndefinedTable:  # a database no index was built in: no tables yet
            raise IndexNotFoundError(f"index {name!r} does not exist: {NOTHING_INDEXED}") from None
        if row is None:
            known = indexes.published_names(conn)
            raise IndexNotFoundError(
                f"index {name!r} does not exist; " + (f"known: {known}" if known else NOTHING_INDEXED)
            )
        version, dim, config = int(row[0]), row[1], row[2]
        if version == 0 or not dim:
            raise IndexNotFoundError(f"index {name!r} has not been published yet")
        cached = self._handles.get(name)
        if cached is not None and cached.version == version and cached.config == config:
            return cached
        parts = partition_names(name)
        bm25_config = config.get("bm25") or {}
        stats = bm25_lib.load_stats(conn, name)
        handle = IndexHandle(
            name=name,
            version=version,
            dim=int(dim),
            config=config,
            chunks=parts["chunks"],
            postings=parts["postings"],
            bm25_params=bm25_lib.Bm25Params.from_config(bm25_config),
            analyzer=bm25_lib.build_analyzer(bm25_config),
            defaults=_index_defaults(config, name),
            label=name.snapshot_of[0] if name.snapshot_of else name,
            vector_storage=str(config.get("vector_storage") or "vector"),
            chunks_total=stats.n_docs if stats is not None else 0,
        )
        with self._lock:
            self._handles[name] = handle
        return handle


@contextlib.contextmanager
def read_transaction(conn: psycopg.Connection) -> Iterator[None]:
    """A read-only REPEATABLE READ transaction whose BEGIN/COMMIT the caller pipelines with queries.

    The caller sends `BEGIN ...` (`IndexHandles.get(begin=True)`) and `COMMIT`
    (`fetch_rows(commit=True)`); this only makes sure an error or an early exit never leaves the
    pooled connection in a transaction.
    """
    try:
        yield
    finally:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            abandon(conn)


def _index_defaults(config: dict[str, Any], name: str) -> IndexDefaults:
    """The index's ranking defaults; a stored config that no longer validates is the caller's 400."""
    try:
        return IndexDefaults.from_config(config, name)
    except ContextConfigError as exc:
        raise SearchError(str(exc)) from exc
