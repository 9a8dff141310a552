"""A small thread-safe pool of autocommit connections to chunkyard's Postgres database."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator

import psycopg
from chunkyard.retrieval.store.db import connect, database_url, is_alive, revive_embedded
from chunkyard.retrieval.store.server import VectorFeatures, detect_features


class Pool:
    """Connections to one database, shared by the store's rooms (documents, indexes, ...)."""

    def __init__(self, url: str | None = None, *, pool_size: int = 4) -> None:
        self.url = url or database_url()
        self._pool: queue.LifoQueue[psycopg.Connection] = queue.LifoQueue()
        self._pool_size = pool_size
        self._features: VectorFeatures | None = None
        self._in_use = 0
        self._counting = threading.Lock()

    @property
    def pool_size(self) -> int:
        return self._pool_size

    @property
    def connections_in_use(self) -> int:
        """Connections handed out now (the service's `/metrics` reports it)."""
        return self._in_use

    @property
    def connections_idle(self) -> int:
        return self._pool.qsize()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """An autocommit connection (use `with conn.transaction():` for atomic work).

        A pooled connection is handed out only while it is alive (see `retrieval.store.db.is_alive`), so
        after a database restart callers get fresh connections instead of the dead ones; a failed
        connect to this process's embedded server starts that server again and tries once more.
        """
        conn = self._pooled() or self._connect()
        with self._counting:
            self._in_use += 1
        try:
            yield conn
        except BaseException as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.close()  # its siblings in the pool saw the same outage
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
            raise
        finally:
            with self._counting:
                self._in_use -= 1
            healthy = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if healthy and self._pool.qsize() < self._pool_size:
                self._pool.put(conn)
            elif not conn.closed:
                conn.close()

    def _pooled(self) -> psycopg.Connection | None:
        while True:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                return None
            if is_alive(conn):
                return conn
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _connect(self) -> psycopg.Connection:
        try:
            return connect(self.url, autocommit=True)
        except psycopg.OperationalError:
            if not revive_embedded(self.url):
                raise
        return connect(self.url, autocommit=True)

    def vector_features(self) -> VectorFeatures:
        """The server's Postgres and pgvector versions and what they allow (read once per pool)."""
        if self._features is None:
            with self.connection() as conn:
                self._features = detect_features(conn)
        return self._features

    def close(self) -> None:
        """Close the idle pooled connections (connections in use close when they come back)."""
        while True:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(psycopg.Error):
                conn.close()
