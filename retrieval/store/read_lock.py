"""A search's read transaction, and the lock it takes before its snapshot so a partition swap lands wholly before or after it.

A large full build is published by swapping a new partition in (`retrieval.indexing.swap`). Table
DDL is not MVCC: a REPEATABLE READ reader whose snapshot predates the swap's commit, but which opens
the partition after it, would find the new table and none of its rows (their writer is not in its
snapshot). Dropping a partition takes an ACCESS EXCLUSIVE lock on the partitioned `chunks` table,
so a reader that locks `chunks` (itself only, ACCESS SHARE) before its first query either finishes
before the swap or starts its snapshot after the swap commits (PostgreSQL's documented way: LOCK
TABLE before the first statement of a REPEATABLE READ transaction). The lock is one statement
pipelined with the reader's others; it waits only while a swap holds `chunks` (milliseconds).
"""

from __future__ import annotations

from psycopg import Connection

READ_LOCK = "LOCK TABLE ONLY chunks IN ACCESS SHARE MODE"


def lock_for_read(conn: Connection) -> None:
    """Take the read lock in the caller's transaction; call it before the transaction's first query."""
    conn.execute(READ_LOCK)


def begin_read(conn: Connection) -> None:
    """Open a search's read transaction (REPEATABLE READ, read only) and take the read lock first;
    pipelined with the caller's next statements when the caller is in a pipeline."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    lock_for_read(conn)


def read_snapshot(conn: Connection) -> None:
    """Make the caller's open transaction a read one (REPEATABLE READ, read only) and take the read lock."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
    lock_for_read(conn)


def end_read(conn: Connection) -> None:
    """Commit a read transaction opened with `begin_read` (pipelined like it)."""
    conn.execute("COMMIT")


def abandon(conn: Connection) -> None:
    """Roll back whatever transaction the connection is in (after an error or an early exit)."""
    conn.execute("ROLLBACK")
