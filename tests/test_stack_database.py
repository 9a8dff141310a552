"""Commands find the stack's database in a `chunkyard stack up` project (issue 41 #7): without
DATABASE_URL, `chunkyard lag` (and every command through `retrieval.store.db.database_url`) uses the
stack's running Postgres instead of starting an empty embedded one beside it, and refuses with the fix
when the stack is stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from chunkyard.orchestration import stack_local
from chunkyard.orchestration.stack import services
from chunkyard.orchestration.stack_stop import postmaster_pid, stop_postgres
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.stack_database import running_stack_url

from tests.conftest import REPO_ROOT
from tests.service_process import free_port

STATE_VARIABLES = ("CHUNKYARD_PROJECT", "CHUNKYARD_HOME", "CHUNKYARD_CONFIGS", "DATABASE_URL", "DAGSTER_HOME")


def _lag(project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}
    env["PYTHONPATH"] = str(REPO_ROOT)
    command = [sys.executable, "-m", "chunkyard.orchestration.cli", "lag"]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_lag_uses_the_running_stacks_database_and_refuses_when_it_is_stopped(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "chunkyard.yaml").write_text("collections: {}\n", encoding="utf-8")
    home = project / ".chunkyard"  # where `chunkyard stack up` keeps its state for this project
    target = stack_local.local_target(home, project, pg_port=free_port())
    postgres = next(service for service in services(target) if service.name == "postgres")
    stack = stack_local.Stack(target)
    running = stack.start(postgres)  # the stack's own Postgres, as `stack up` starts it
    try:
        deadline = time.monotonic() + 120
        while not stack_local.check(postgres, target):
            assert running.process.poll() is None, stack_local.log_tail(running.log)
            assert time.monotonic() < deadline, stack_local.log_tail(running.log)
            time.sleep(0.5)
        store = Store(target.database_url())
        try:
            store.migrate()  # the stack's `chunkyard instance` migrates its database
        finally:
            store.close()
        assert running_stack_url(home) == target.database_url()

        done = _lag(project)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "No index yet" in done.stdout
        assert 'relation "indexes" does not exist' not in done.stdout + done.stderr
        assert not (home / "pg").exists()  # no embedded database was started beside the stack's
    finally:
        pid = postmaster_pid(Path(target.pgdata))
        if pid is not None:
            stop_postgres(pid)
        running.process.wait(timeout=120)

    assert running_stack_url(home) is None
    stopped = _lag(project)
    assert stopped.returncode != 0
    (line,) = stopped.stderr.strip().splitlines()
    assert "the stack is not running" in line and "chunkyard stack up" in line, stopped.stderr
    assert not (home / "pg").exists()


def test_lag_in_a_fresh_project_says_there_is_no_index_yet(tmp_path: Path) -> None:
    """No stack, nothing indexed: the embedded database is new, and `lag` says so in words."""
    (tmp_path / "chunkyard.yaml").write_text("collections: {}\n", encoding="utf-8")
    done = _lag(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "No index yet: `chunkyard index` builds them."
