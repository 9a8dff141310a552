"""What readers ask of the `indexes` registry: an index's published state, which indexes exist or are published."""

from __future__ import annotations

from typing import Any

import psycopg


def queue_published_state(conn: psycopg.Connection, index_name: str) -> psycopg.Cursor[Any]:
    """Cursor of the index's (version, dim, config); no row when it is not registered (version 0:
    registered, never published)."""
    return conn.execute("SELECT version, dim, config FROM indexes WHERE name = %s", (index_name,))


def published_names(conn: psycopg.Connection) -> list[str]:
    """The names of the published indexes, sorted."""
    return [r[0] for r in conn.execute("SELECT name FROM indexes WHERE version > 0 ORDER BY name")]


def schema_and_published(conn: psycopg.Connection) -> tuple[int, int]:
    """The schema version and the number of published indexes.

    Raises `psycopg.errors.UndefinedTable` on a database nothing was migrated in.
    """
    version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
    published = conn.execute("SELECT count(*) FROM indexes WHERE version > 0").fetchone()[0]
    return int(version), int(published)


def registered(conn: psycopg.Connection, collection: str | None = None) -> list[tuple[str, str]]:
    """Every registered index's (name, collection), by name; only `collection`'s when given."""
    query = "SELECT name, collection FROM indexes"
    params: tuple[str, ...] = ()
    if collection is not None:
        query += " WHERE collection = %s"
        params = (collection,)
    return conn.execute(query + " ORDER BY name", params).fetchall()
