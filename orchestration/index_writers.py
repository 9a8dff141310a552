"""One writer per collection for `chunkyard index`: it waits for (or refuses) a run of the collection in flight.

The daemon's runs of a collection queue behind each other (the `chunkyard/writer` tag's concurrency
limit), but `chunkyard index` runs in this process, outside the queue. Two runs of one collection
stage into the same per-index staging area, and one of them then stops with "staging taken over".
So before it starts, the command:
- takes a Postgres advisory lock per collection for as long as it runs, so a second `chunkyard index` on
  the same collection waits for the first, even between its check and its run;
- waits until no queued or running run of the instance touches the collection (by tag or asset
  selection), failing the runs whose process is gone on the way, so it never waits for a dead run;
- tags its own run like the daemon's, so the run queue holds the daemon's next run of a collection
  until this one ends.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import psycopg
from chunkyard.assets.reconciling import COLLECTIONS_TAG, IN_FLIGHT, WRITER_TAG
from chunkyard.assets.runs import sweep_dead_runs
from dagster import DagsterInstance, RunsFilter

POLL_SECONDS = 2.0


class WriterBusy(Exception):
    """Another run writes the collection and the caller asked not to wait (one line: which run)."""


def run_tags(names: Sequence[str]) -> dict[str, str]:
    """The tags of a run of `names`: what the sensor's coverage and the run queue's limit read.

    The queue's limit is per tag value, so only a run of one collection can carry the writer tag;
    a run of several relies on the lock and the wait alone."""
    tags = {COLLECTIONS_TAG: ",".join(names)}
    if len(names) == 1:
        tags[WRITER_TAG] = names[0]
    return tags


def runs_in_flight(instance: DagsterInstance, prefixes: Mapping[str, str]) -> dict[str, list[str]]:
    """Collection (`prefixes`: name -> asset key prefix) -> ids of the queued or running runs touching it."""
    found: dict[str, list[str]] = {}
    for run in instance.get_runs(RunsFilter(statuses=IN_FLIGHT)):
        tagged = set(run.tags.get(COLLECTIONS_TAG, "").split(","))
        selected = {key.path[0] for key in (run.asset_selection or ())}
        for name, prefix in prefixes.items():
            if name in tagged or prefix in selected:
                found.setdefault(name, []).append(run.run_id)
    return found


def _describe(busy: Mapping[str, list[str]]) -> str:
    return "; ".join(f"{name}: run {', '.join(ids)}" for name, ids in sorted(busy.items()))


@contextlib.contextmanager
def sole_writer(
    instance: DagsterInstance,
    database_url: str,
    prefixes: Mapping[str, str],
    wait: bool = True,
    say: Callable[[str], None] = print,
) -> Iterator[None]:
    """Hold the collections of `prefixes` for one run: lock, then wait until no other run touches them.

    With `wait` False a busy collection raises `WriterBusy` instead. The lock is released when the
    block ends (the connection closes), also when the process dies."""
    names = sorted(prefixes)  # one order for every process: no lock-order deadlock
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name in names:
            key = ("chunkyard.index-writer:" + name,)
            taken = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", key).fetchone()
            if taken and taken[0]:
                continue
            if not wait:
                raise WriterBusy(f"collection {name}: another `chunkyard index` is indexing it")
            say(f"Waiting for another `chunkyard index` of {name} to finish (Ctrl-C to stop) ...")
            conn.execute("SELECT pg_advisory_lock(hashtext(%s))", key)
        announced = False
        while busy := runs_in_flight(instance, prefixes):
            if not wait:
                raise WriterBusy(f"a run is indexing it already ({_describe(busy)})")
            if not announced:
                say(f"Waiting for the run in progress to finish ({_describe(busy)}; Ctrl-C to stop) ...")
                announced = True
            time.sleep(POLL_SECONDS)
            sweep_dead_runs(instance)
        yield
