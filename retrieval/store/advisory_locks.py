"""Session advisory locks keyed by a name (`hashtext`): held until released or the connection closes."""

from __future__ import annotations

import psycopg


def try_lock(conn: psycopg.Connection, key: str) -> bool:
    """Take the lock on `key` for the connection's session if it is free; whether it was taken."""
    taken = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()
    return bool(taken and taken[0])


def wait_lock(conn: psycopg.Connection, key: str) -> None:
    """Take the lock on `key` for the connection's session, waiting while another session holds it."""
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
