"""Large documents and runaway queries: the span check is linear, and no query outlives its bounds.

The span check on a multi-MB document with tens of thousands of chunks finishes under a short
statement_timeout in a handful of round trips (one per document, one per batch of chunks); the
earlier substr()-per-chunk SQL decompressed the TOAST-ed text again for every chunk and ran for
hours on a 50 MB file. A query past CHUNKYARD_STATEMENT_TIMEOUT is cancelled by the server, and
the query of a client killed with SIGKILL stops within seconds (client_connection_check_interval).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.conftest import REPO_ROOT

DOC_CHARS = 4_000_000
CHUNK_CHARS = 100


def _large_document(seed: int = 7) -> str:
    """Compressible prose-like text (so Postgres TOAST-compresses it), DOC_CHARS long."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(800)
    ]
    parts: list[str] = []
    size = 0
    while size < DOC_CHARS:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 18))).capitalize() + ". "
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts)[:DOC_CHARS]


def _stage(store, collection: str, index_name: str, text: str, *, corrupt: int | None = None) -> int:
    """The document and its non-overlapping CHUNK_CHARS chunks, written straight to the tables."""
    spans = [(s, min(s + CHUNK_CHARS, len(text))) for s in range(0, len(text), CHUNK_CHARS)]
    with store.connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO documents (collection, doc_id, sha256, text) VALUES (%s, %s, %s, %s)",
            (collection, "big.txt", hashlib.sha256(text.encode()).hexdigest(), text),
        )
        with conn.cursor().copy(
            'COPY staged_chunks (index_name, chunk_id, doc_id, start, "end", text, embed_text, content_hash)'
            " FROM STDIN"
        ) as copy:
            for i, (s, e) in enumerate(spans):
                chunk = text[s:e] if i != corrupt else text[s:e].upper()
                copy.write_row((index_name, f"c{i:06d}", "big.txt", s, e, chunk, chunk, str(i)))
    return len(spans)


class _Trace:
    """Counts the statements one connection sends (libpq's protocol trace: Query/Parse messages)."""

    def __init__(self, conn: psycopg.Connection, path: Path) -> None:
        self.conn, self.path = conn, path

    def __enter__(self) -> _Trace:
        self.handle = open(self.path, "w")  # noqa: SIM115 (libpq writes to the descriptor)
        self.conn.pgconn.trace(self.handle.fileno())
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.pgconn.untrace()
        self.handle.close()

    def statements(self) -> list[str]:
        lines = self.path.read_text().splitlines()
        return [ln for ln in lines if "\tF\t" in ln and ("\tQuery\t" in ln or "\tParse\t" in ln)]


@pytest.fixture()
def bounded_store(pg_url: str, monkeypatch: pytest.MonkeyPatch):
    """A store whose sessions have a 20 s statement_timeout: far above a linear check, far below a
    quadratic one on a 4 MB document."""
    from chunkyard.retrieval.store import Store

    monkeypatch.setenv("CHUNKYARD_STATEMENT_TIMEOUT", "20s")
    store = Store(pg_url, pool_size=1)
    store.migrate()
    yield store
    store.close()


def test_span_check_is_linear_on_a_large_document(bounded_store, tmp_path: Path) -> None:
    from chunkyard.pipeline.checks import check_spans
    from chunkyard.retrieval.store.integrity import SPAN_BATCH, spans

    collection, index_name = f"spans{uuid.uuid4().hex[:8]}", f"spans{uuid.uuid4().hex[:8]}/big"
    text = _large_document()
    n = _stage(bounded_store, collection, index_name, text)
    assert n >= 40_000
    # The pool holds one connection: the check gets the one traced here.
    with bounded_store.connection() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "20s"
    with _Trace(conn, tmp_path / "trace.txt") as trace:
        check = check_spans(spans(bounded_store, collection, index_name, "staged"))
    assert check.passed, check.metadata
    assert check.metadata["chunks_checked"] == n
    statements = trace.statements()
    # BEGIN, DECLARE, one FETCH per batch (and a last empty one), the document's text, CLOSE, COMMIT.
    assert len(statements) <= n // SPAN_BATCH + 8, statements
    assert sum("FROM documents" in s for s in statements) == 1  # the text is read once


def test_span_check_names_a_mismatched_chunk(bounded_store) -> None:
    from chunkyard.pipeline.checks import check_spans
    from chunkyard.retrieval.store.integrity import spans

    collection, index_name = f"spans{uuid.uuid4().hex[:8]}", f"spans{uuid.uuid4().hex[:8]}/bad"
    text = _large_document(seed=3)[:50_000]
    _stage(bounded_store, collection, index_name, text, corrupt=42)
    with bounded_store.connection() as conn:  # and a chunk whose document is gone
        conn.execute(
            'INSERT INTO staged_chunks (index_name, chunk_id, doc_id, start, "end", text, embed_text, content_hash)'
            " VALUES (%s, 'orphan', 'gone.txt', 0, 3, 'abc', 'abc', 'x')",
            (index_name,),
        )
    check = check_spans(spans(bounded_store, collection, index_name, "staged"))
    assert not check.passed
    assert check.metadata["span_mismatches"] == 2
    assert "big.txt[4200:4300]" in check.metadata["examples"]
    assert "gone.txt[0:3] (document missing)" in check.metadata["examples"]


def test_a_query_past_the_statement_timeout_is_cancelled(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chunkyard.retrieval.store.db import STATEMENT_TIMEOUT_ENV, connect, session_options

    monkeypatch.setenv(STATEMENT_TIMEOUT_ENV, "1s")
    with connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1s"
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0] == "30min"
        assert conn.execute("SHOW client_connection_check_interval").fetchone()[0] == "5s"
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            conn.execute("SELECT pg_sleep(30)")
        assert conn.execute("SELECT 1").fetchone()[0] == 1  # the session itself lives on
    monkeypatch.setenv(STATEMENT_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=STATEMENT_TIMEOUT_ENV):
        session_options(pg_url)


def test_a_killed_clients_query_dies_with_it(pg_url: str) -> None:
    """kill -9 a client mid-query: the server notices the dead socket and ends the query itself."""
    tag = f"chunkyard-kill-{uuid.uuid4().hex[:8]}"
    script = (
        "import sys\nfrom chunkyard.retrieval.store.db import connect\n"
        "conn = connect(sys.argv[1], autocommit=True)\n"
        "conn.execute(\"SELECT set_config('application_name', %s, false)\", (sys.argv[2],))\n"
        "conn.execute('SELECT pg_sleep(600)')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    client = subprocess.Popen([sys.executable, "-c", script, pg_url, tag], env=env, cwd=REPO_ROOT)

    def active() -> int:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'active'",
                (tag,),
            ).fetchone()[0]

    try:
        deadline = time.monotonic() + 60
        while active() == 0:
            assert client.poll() is None, "the client exited before its query started"
            assert time.monotonic() < deadline, "the client's query never started"
            time.sleep(0.2)
        os.kill(client.pid, signal.SIGKILL)
        client.wait(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    deadline = time.monotonic() + 60  # the server checks the client every 5 s
    while active():
        assert time.monotonic() < deadline, "the killed client's query is still running"
        time.sleep(0.5)
