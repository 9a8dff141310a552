"""One writer per collection for `chunkyard index`: it waits for (or refuses) a live run of the collection.

The daemon's runs of a collection queue behind each other and behind any run in progress of it, by
Dagster's run queue (the WRITER_TAG's tag concurrency limit, orchestration.instance). `chunkyard index`
executes its run in this process, outside the queue (it needs no daemon, and starts no second
process), so before it starts, the command:
- takes a Postgres advisory lock per collection for as long as it runs, so a second `chunkyard index` on
  the same collection waits for the first, even between its check and its run (the queue cannot see
  a run before it exists);
- waits until no live run of the instance touches the collection (`assets.runs.collections_in_flight`,
  the one judge: it fails the runs whose process is gone, NOT_STARTED ones included, so it never waits
  for a dead run);
- tags its own run with the writer tag and its creator (`assets.runs.creator_tags`), so the run queue
  holds the daemon's next run of the collection until this one ends, and a run this command leaves
  NOT_STARTED when it is killed is failed by the next command at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import psycopg
from chunkyard.assets.runs import COLLECTIONS_TAG, WRITER_TAG, collections_in_flight
from chunkyard.retrieval.store.server import try_lock, wait_lock
from dagster import DagsterInstance

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
            key = "chunkyard.index-writer:" + name
            if try_lock(conn, key):
                continue
            if not wait:
                raise WriterBusy(f"collection {name}: another `chunkyard index` is indexing it")
            say(f"Waiting for another `chunkyard index` of {name} to finish (Ctrl-C to stop) ...")
            wait_lock(conn, key)
        announced = False
        while busy := collections_in_flight(instance, prefixes):
            if not wait:
                raise WriterBusy(f"a run is indexing it already ({_describe(busy)})")
            if not announced:
                say(f"Waiting for the run in progress to finish ({_describe(busy)}; Ctrl-C to stop) ...")
                announced = True
            time.sleep(POLL_SECONDS)
        yield
