"""The progress of a `chunkyard index` run, read from the Dagster event log while it runs, and the
progress lines long steps write into it (`assets.progress.step_progress`)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import TextIO

from chunkyard.assets.progress import PROGRESS_PREFIX
from chunkyard.orchestration.run_report import interrupted

POLL_S = 1.0
TAG = "chunkyard/invocation"


class RunProgress:
    """`with RunProgress(total, stream):` around a materialize() tagged with `.tags`: a line per
    finished step (and, on a terminal, a live line with the running step and the elapsed time)."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total = total
        self.stream = stream
        self.tags = {TAG: uuid.uuid4().hex}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="chunkyard-progress", daemon=True)
        self._tty = stream.isatty()
        self._started = time.monotonic()

    def __enter__(self) -> RunProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=POLL_S * 5)
        if self._tty:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _watch(self) -> None:
        try:
            from dagster import DagsterEventType, DagsterInstance, RunsFilter

            instance = DagsterInstance.get()  # its own connections: the run uses the main thread's
            kinds = {
                DagsterEventType.STEP_START,
                DagsterEventType.STEP_SUCCESS,
                DagsterEventType.STEP_FAILURE,
            }
            run_id = None
            cursor: str | None = None
            started: dict[str, float] = {}
            inside: dict[str, str] = {}  # a running step's latest progress line (`step_progress`)
            finished = 0
            while True:
                last = self._done.wait(POLL_S)  # after the run: one more pass for its last steps
                if run_id is None:
                    runs = instance.get_runs(RunsFilter(tags=self.tags), limit=1)
                    run_id = runs[0].run_id if runs else None
                    if run_id is None:
                        if last:
                            return
                        continue
                records, more = [], True
                while more:  # the records since the last pass, in order
                    connection = instance.get_records_for_run(run_id, cursor=cursor)
                    records += connection.records
                    cursor, more = connection.cursor, connection.has_more
                for record in records:
                    entry = record.event_log_entry
                    event = entry.dagster_event
                    if event is None:
                        if entry.step_key and entry.user_message.startswith(PROGRESS_PREFIX):
                            inside[entry.step_key] = entry.user_message.removeprefix(PROGRESS_PREFIX)
                            if not self._tty:
                                self._line(f"        {entry.step_key}: {inside[entry.step_key]}")
                        continue
                    if event.event_type not in kinds or event.step_key is None:
                        continue
                    if event.event_type == DagsterEventType.STEP_START:
                        started[event.step_key] = entry.timestamp
                        continue
                    finished += 1
                    inside.pop(event.step_key, None)
                    took = entry.timestamp - started.pop(event.step_key, entry.timestamp)
                    mark = "ok" if event.event_type == DagsterEventType.STEP_SUCCESS else "FAILED"
                    if mark == "FAILED" and interrupted([event]):
                        mark = "stopped"  # Ctrl-C: the command says so, with how to resume
                    self._line(f"  [{finished}/{self.total}] {mark:6} {event.step_key} ({took:.1f} s)")
                if last:
                    return
                if self._tty and started:
                    running = ", ".join(
                        f"{step}: {inside[step]}" if step in inside else step for step in sorted(started)
                    )
                    elapsed = time.monotonic() - self._started
                    self.stream.write(f"\r\033[K  running {running[:110]} ... {elapsed:.0f} s")
                    self.stream.flush()
        except Exception as exc:  # the display is a convenience: never fail the run for it
            self._line(f"  (progress display stopped: {type(exc).__name__}: {exc})")

    def _line(self, text: str) -> None:
        self.stream.write(("\r\033[K" if self._tty else "") + text + "\n")
        self.stream.flush()
