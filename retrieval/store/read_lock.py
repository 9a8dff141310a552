"""The lock a reader takes before its snapshot, so a partition swap lands wholly before or after it.

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
