"""A Postgres server's own objects, for the stack and Dagster's storage: is it up, a database, a schema."""

from __future__ import annotations

import psycopg
from psycopg import sql


def ping(url: str, *, autocommit: bool = False, connect_timeout: int | None = None) -> None:
    """Connect to `url` and run one trivial query; raises `psycopg.Error` (OperationalError when the
    server does not accept connections)."""
    options = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    with psycopg.connect(url, autocommit=autocommit, **options) as conn:
        conn.execute("SELECT 1")


def ensure_database(maintenance_url: str, name: str, *, connect_timeout: int | None = None) -> bool:
    """Create the database `name` through the server's maintenance database if it does not exist;
    True when it was created. Raises `psycopg.Error` when the server cannot be reached."""
    options = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    with psycopg.connect(maintenance_url, autocommit=True, **options) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return True


def create_schema(url: str, schema: str) -> None:
    """Create the schema `schema` in the database of `url` if it does not exist."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
