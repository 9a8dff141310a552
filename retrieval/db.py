"""Which Postgres to use: DATABASE_URL if set, else an embedded pgserver under CHUNKYARD_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector


def chunkyard_home() -> Path:
    """Where local state lives (embedded Postgres data, Dagster home): CHUNKYARD_HOME or ./.chunkyard."""
    return Path(os.environ.get("CHUNKYARD_HOME", ".chunkyard")).resolve()


_servers: dict[str, object] = {}


def embedded_database_url(data_dir: str | Path | None = None) -> str:
    """Start (or attach to) the embedded Postgres 16 + pgvector and return its URL."""
    import pgserver

    path = Path(data_dir) if data_dir else chunkyard_home() / "pg"
    path.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    if key not in _servers:
        _servers[key] = pgserver.get_server(key)
    return _servers[key].get_uri()  # type: ignore[attr-defined]


def database_url() -> str:
    """DATABASE_URL when the user has their own Postgres, else the embedded one."""
    url = os.environ.get("DATABASE_URL")
    return url if url else embedded_database_url()


def connect(url: str | None = None, *, autocommit: bool = False) -> psycopg.Connection:
    """A psycopg 3 connection with the pgvector extension created and its types registered."""
    conn = psycopg.connect(url or database_url(), autocommit=autocommit)
    ensure_vector_extension(conn)
    register_vector(conn)
    return conn


def ensure_vector_extension(conn: psycopg.Connection) -> None:
    exists = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    if not exists:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if not conn.autocommit:
            conn.commit()
