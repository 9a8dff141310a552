"""The document sensor's reconciler, Dagster side: which collections a run already covers, what earlier
runs of a gap did, and the run requests for the rest (the gap itself is `pipeline.reconcile`'s).

A collection is covered while a live run touches it (`assets.runs.collections_in_flight`: dead runs
are failed first, so a run left NOT_STARTED by a killed `chunkyard index` covers nothing) or while the sensor's own request for it is younger than REQUEST_GRACE_SECONDS
and has not ended (the daemon creates the run after the tick). Reconcile runs carry the gap's digest
(`GAP_TAG`) and attempt number, so the next tick counts them for the backoff and the give-up.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from chunkyard.assets.keys import index_job_name
from chunkyard.assets.resources import PostgresResource
from chunkyard.assets.runs import COLLECTIONS_TAG, WRITER_TAG, collections_in_flight, host_tags
from chunkyard.pipeline.reconcile import Attempt, Gap, GapBackoff, collection_gap, decide
from chunkyard.retrieval.settings.config import Collection
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunRequest, RunsFilter

GAP_TAG = "chunkyard/gap"
ATTEMPT_TAG = "chunkyard/attempt"
RUN_KEY_TAG = "dagster/run_key"
REQUEST_GRACE_SECONDS = 60.0
ENDED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


def collection_tags(name: str) -> dict[str, str]:
    """The tags every indexing run of collection `name` carries (coverage and the per-collection queue)."""
    return {COLLECTIONS_TAG: name, WRITER_TAG: name}


def busy_collections(instance: DagsterInstance, prefixes: Mapping[str, str]) -> set[str]:
    """Collections (`prefixes`: name -> asset key prefix) that a live run touches (dead runs failed first)."""
    return set(collections_in_flight(instance, prefixes))


def recently_requested(instance: DagsterInstance, requested: Mapping[str, list], now: float) -> set[str]:
    """Collections whose last request (cursor: name -> [run key, time]) is young and not ended."""
    young = set()
    for name, (run_key, at) in requested.items():
        if now - float(at) >= REQUEST_GRACE_SECONDS:
            continue
        runs = instance.get_runs(RunsFilter(tags={RUN_KEY_TAG: run_key}, statuses=ENDED), limit=1)
        if not runs:
            young.add(name)
    return young


def attempts(instance: DagsterInstance, name: str, digest: str) -> list[Attempt]:
    """The earlier reconcile runs of this exact gap."""
    records = instance.get_run_records(RunsFilter(tags={GAP_TAG: digest, COLLECTIONS_TAG: name}), limit=100)
    return [
        Attempt(
            ended_at=(record.end_time or record.update_timestamp.timestamp())
            if record.dagster_run.status in ENDED
            else None,
            succeeded=record.dagster_run.status == DagsterRunStatus.SUCCESS,
        )
        for record in records
    ]


@dataclass
class Reconciled:
    """One tick's reconcile outcome: the requests, what was given up (name -> digest), lines for the
    log (requests, give-ups) and gaps waiting for a retry (for the skip reason only: every tick)."""

    requests: list[RunRequest] = field(default_factory=list)
    given_up: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    checked: set[str] = field(default_factory=set)  # collections compared this tick (not covered)


def reconcile(
    instance: DagsterInstance,
    postgres: PostgresResource,
    collections: Mapping[str, Collection],
    targets: Mapping[str, tuple[list[AssetKey], list[str]]],
    *,
    skip: set[str],
    policy: GapBackoff,
    small_run_config: Mapping,
    small_max: int,
    seen: Mapping[str, Mapping[str, str]] | None = None,
) -> Reconciled:
    """Run requests for every collection (not in `skip`) whose indexes do not serve its folder.

    `targets`: name -> (the asset keys an indexing run selects, the index names it publishes);
    `seen`: name -> the tick's scan (id -> content hash), so a file written after it is left to the
    next tick's change request instead of getting a reconcile run too.
    """
    out = Reconciled()
    now = time.time()
    store = postgres.store()
    for name in sorted(set(collections) - skip):
        keys, index_names = targets[name]
        gap: Gap = collection_gap(store, collections[name], index_names, (seen or {}).get(name))
        out.checked.add(name)
        if not gap:
            continue
        digest = gap.digest()
        decision = decide(attempts(instance, name, digest), now, policy)
        if decision.action == "give_up":
            out.given_up[name] = digest
            out.messages.append(f"{gap.summary()}: {decision.reason}")
            continue
        if decision.action == "wait":
            out.waiting.append(f"{gap.summary()}: {decision.reason}")
            continue
        out.messages.append(f"{gap.summary()}: requesting reconcile run {decision.attempt}")
        small = gap.documents <= small_max
        out.requests.append(
            RunRequest(
                run_key=f"reconcile-{name}-{digest}-{decision.attempt}",
                job_name=index_job_name(name),
                asset_selection=keys,
                tags={
                    **host_tags(),
                    **collection_tags(name),
                    "chunkyard/trigger": "reconcile",
                    GAP_TAG: digest,
                    ATTEMPT_TAG: str(decision.attempt),
                    "chunkyard/executor": "in_process" if small else "multiprocess",
                    "chunkyard/documents_behind": str(gap.documents),
                },
                run_config=dict(small_run_config) if small else {},
            )
        )
    return out
