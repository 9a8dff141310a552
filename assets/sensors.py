"""Document-update sensor: watches the folder collections and re-indexes what changed.

The cursor is JSON `{"version": 2, "generation": N, "collections": {collection: {document id:
content hash}}, "signatures": {collection: {document id: stat signature}}}`. A file has two
fingerprints: its stat signature says whether it may be skipped, its content hash what it is. Only
files whose signature changed (or that have none) are loaded again, through the documents step's own
loader (`pipeline.documents.hash_folder`), and their content hash is the step's `Document.sha256`, the
sha256 of the decoded text: touching a file, or rewriting it with the same text, does nothing, and a
restored backup with old mtimes is still noticed. A file that fails to load gets a fingerprint of its
failure and its stat (`failure_fingerprint`): a change to it still requests a run (which records the
failure), an unchanged one requests nothing. The generation counts the changes
observed; it goes up by one on every tick that sees a change. Each such tick requests ONE run (the
changed collections' documents + chunk/embedding/BM25/publish assets) whose run key is the
generation plus a hash of the change set: re-evaluating a tick from the same cursor gives the same
key (Dagster runs it once), while a change seen again later (A->B, B->A, A->B) gets a new key, so
it is never dropped as "already completed". A cursor without the current `version` (earlier ones
held the sha256 of each file's bytes, which differs from its content hash wherever the bytes are not
the text: a PDF, HTML, a BOM) reads as no cursor: a first tick, which compares with the store instead
of requesting a run for every such file. Its backoff record (`requested`) starts afresh. Evaluations and leaderboards follow through
their automation conditions. The first tick (no cursor yet) compares the folders with the
documents already in the database and requests a run (tagged `initial_scan`) only if they differ;
its generation starts from the clock, so a reset cursor never reuses an earlier key.

The runs it requests carry `host_tags()` so the dead-run janitor (`build_janitor_sensor`, a
sensor of its own) can judge them: every tick it sweeps dead runs (`assets.runs.sweep_dead_runs`),
so a run killed while it held the `embedding` pool slot is failed and its slot freed, and a
daemon heals the pool by itself.

Requests are per collection (tagged `chunkyard/writer`: the instance queues one run per collection at
a time). The cursor moves on when a change is requested, so every tick ends with the reconciler
(`assets.reconciling`): for each collection that no queued or running run covers, it compares
the folder, the stored documents and each published index, and requests a run for any gap (a run
that died mid-way), with backoff between retries and a report after too many. The cursor keeps the
last request per collection (`requested`) and the gaps already reported as given up (`reported`).
"""

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkyard.assets.keys import index_job_name
from chunkyard.assets.reconciling import (
    Reconciled,
    busy_collections,
    collection_tags,
    recently_requested,
    reconcile,
)
from chunkyard.assets.resources import PostgresResource
from chunkyard.assets.runs import host_tags, sweep_dead_runs
from chunkyard.chunking.environment import env_int
from chunkyard.pipeline.documents import FolderHashes, hash_folder
from chunkyard.pipeline.reconcile import GapBackoff
from chunkyard.retrieval.settings.config import Collection
from dagster import (
    AssetKey,
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

SENSOR_NAME = "document_update_sensor"
JANITOR_NAME = "dead_run_janitor"
MINIMUM_INTERVAL_SECONDS = 30
# Overrides MINIMUM_INTERVAL_SECONDS (whole seconds, at least 1): tests tick fast through the daemon.
INTERVAL_ENV = "CHUNKYARD_SENSOR_INTERVAL"
# Up to this many changed documents, the run executes its steps in one process: starting a
# Python process per step (several seconds each) would cost more than the work itself.
IN_PROCESS_MAX_CHANGED = 50
IN_PROCESS_RUN_CONFIG = {"execution": {"config": {"in_process": {}}}}
# The cursor's format. 2: content hashes (`Document.sha256`); before: sha256 of the file's bytes.
CURSOR_VERSION = 2


@dataclass
class FolderChanges:
    """Added, changed and deleted document ids of one collection since the last tick."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.deleted)


def diff(previous: Mapping[str, str], current: Mapping[str, str]) -> FolderChanges:
    return FolderChanges(
        added=sorted(set(current) - set(previous)),
        changed=sorted(k for k in current if k in previous and previous[k] != current[k]),
        deleted=sorted(set(previous) - set(current)),
    )


def change_set_key(
    changes: Mapping[str, FolderChanges],
    previous: Mapping[str, Mapping[str, str]],
    current: Mapping[str, Mapping[str, str]],
    generation: int,
) -> str:
    """The run key of one observed change: its generation and a hash of exactly what changed (ids
    and their before/after hashes). The same tick evaluated twice gives the same key; the same
    change observed again at a later generation does not."""
    payload = {
        name: {
            doc: [previous.get(name, {}).get(doc), current.get(name, {}).get(doc)]
            for doc in [*c.added, *c.changed, *c.deleted]
        }
        for name, c in sorted(changes.items())
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]
    return f"g{generation}-{digest}"


def sensor_interval() -> int:
    """The sensor's minimum interval: CHUNKYARD_SENSOR_INTERVAL if set, else MINIMUM_INTERVAL_SECONDS."""
    return env_int(INTERVAL_ENV, MINIMUM_INTERVAL_SECONDS, unit="whole seconds")


def baseline_from_store(
    context: SensorEvaluationContext,
    postgres: PostgresResource,
    collection: Collection,
    current: FolderHashes,
) -> dict[str, str]:
    """A cursor entry for a first tick: the stored documents' content hashes, which the folder's are
    compared with as they are (unchanged, changed, deleted; files not stored are added), and for a
    file that fails to load as the store already records (same reason) its current fingerprint, so it
    counts as seen. Without a reachable database every file counts as added."""
    try:
        documents = postgres.store().documents
        stored = documents.hashes(collection.name)
        failed = {f["path"]: f["reason"] for f in documents.failures(collection.name)}
    except Exception as exc:  # the sensor must not die on a database hiccup: index everything
        context.log.warning(f"{collection.name}: cannot read stored documents ({exc}); treating all as new")
        return {}
    seen_failures = {
        doc_id: current.hashes[doc_id]
        for doc_id, reason in current.failures.items()
        if failed.get(doc_id) == reason
    }
    return {**stored, **seen_failures}


@dataclass(frozen=True)
class Cursor:
    """What the sensor remembers: the changes observed so far, every document's content hash, the stat
    signatures under which those hashes may be reused, the last request per collection ([run key,
    time]) and the gaps reported as given up (collection -> digest)."""

    generation: int
    hashes: dict[str, dict[str, str]]
    requested: dict[str, list] = field(default_factory=dict)
    reported: dict[str, str] = field(default_factory=dict)
    signatures: dict[str, dict[str, str]] = field(default_factory=dict)

    def dumps(self) -> str:
        data: dict = {
            "version": CURSOR_VERSION,
            "generation": self.generation,
            "collections": self.hashes,
            "signatures": self.signatures,
        }
        if self.requested:
            data["requested"] = self.requested
        if self.reported:
            data["reported"] = self.reported
        return json.dumps(data, sort_keys=True)

    def known(self, collection: str) -> FolderHashes:
        """What the last tick saw of one collection, for `hash_folder` to reuse."""
        return FolderHashes(self.hashes.get(collection, {}), self.signatures.get(collection, {}))


def parse_cursor(cursor: str | None) -> Cursor | None:
    """The cursor's contents; None when there is none, it is unreadable or it is of another
    `version` (a first tick: earlier cursors held byte hashes, which would read as changes)."""
    if not cursor:
        return None
    try:
        data = json.loads(cursor)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("version") != CURSOR_VERSION:
        return None
    generation = data.get("generation")
    collections = data.get("collections")
    if isinstance(generation, bool) or not isinstance(generation, int) or not isinstance(collections, dict):
        return None
    requested = data.get("requested")
    reported = data.get("reported")
    signatures = data.get("signatures")
    return Cursor(
        generation,
        dict(collections),
        dict(requested) if isinstance(requested, dict) else {},
        dict(reported) if isinstance(reported, dict) else {},
        dict(signatures) if isinstance(signatures, dict) else {},
    )


def initial_generation() -> int:
    """A first tick's generation: the clock in milliseconds, above any counter a reset cursor had."""
    return time.time_ns() // 1_000_000


def sweep(context: SensorEvaluationContext) -> list[str]:
    """Fail dead runs of this host and free their pool slots; never fails the tick."""
    try:
        swept = sweep_dead_runs(context.instance)
    except Exception as exc:  # the sweep is a repair: a tick must still see the changes without it
        context.log.warning(f"dead-run sweep failed ({exc}); stuck runs stay until the next tick")
        return []
    for run_id in swept:
        context.log.warning(f"run {run_id}: its process is gone; marked failed and its pool slots freed")
    return swept


def build_document_sensor(
    collections: Mapping[str, Collection],
    indexing_keys: Mapping[str, list[AssetKey]],
    *,
    index_names: Mapping[str, list[str]] | None = None,
    name: str = SENSOR_NAME,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    jobs: Mapping[str, Any],  # define_asset_job's jobs (their class is not public)
) -> SensorDefinition | None:
    """The sensor over every folder collection (None when no collection reads folders).

    `index_names` (collection -> the indexes its runs publish) turns on the reconciler. `jobs`
    (collection -> its named index job, `index_job_name`) carry the sensor's runs, so the UI's runs
    page names them by collection; each run selects the indexing assets of its job.
    """
    watched = {n: c for n, c in collections.items() if c.folders and n in indexing_keys and n in jobs}
    if not watched:
        return None

    @sensor(
        name=name,
        description=(
            "Watches the folders of collections "
            + ", ".join(sorted(watched))
            + ": one run per collection and change set (added, changed, deleted files), deduplicated by"
            " content hash (of the text; only files whose stat changed are read); then re-runs any gap"
            " between a folder and its published indexes that no run covers (a run that died), with backoff."
        ),
        minimum_interval_seconds=sensor_interval(),
        default_status=default_status,
        jobs=[jobs[n] for n in sorted(watched)],
    )
    def document_update_sensor(context: SensorEvaluationContext, postgres: PostgresResource) -> SensorResult:
        now = time.time()
        cursor = parse_cursor(context.cursor)
        scans = {n: hash_folder(c, cursor.known(n) if cursor else None) for n, c in watched.items()}
        current = {n: scan.hashes for n, scan in scans.items()}
        signatures = {n: scan.signatures for n, scan in scans.items()}
        if cursor is None:
            # First tick: compare the folders with what the database already holds, so starting
            # the UI after `chunkyard demo` does not re-run anything.
            previous = {n: baseline_from_store(context, postgres, c, scans[n]) for n, c in watched.items()}
            generation = initial_generation()
        else:
            previous = cursor.hashes
            generation = cursor.generation + 1
        changes = {n: diff(previous.get(n, {}), current[n]) for n in watched}
        changed = {n: c for n, c in changes.items() if c}
        requested = dict(cursor.requested) if cursor is not None else {}
        reported = dict(cursor.reported) if cursor is not None else {}
        requests = [
            change_request(context, n, c, indexing_keys[n], previous, current, generation, cursor is None)
            for n, c in sorted(changed.items())
        ]
        for request in requests:
            requested[request.tags["chunkyard/collections"]] = [request.run_key, now]
        reconciled = (
            run_reconciler(context, postgres, watched, indexing_keys, index_names, requested, now, current)
            if index_names is not None
            else Reconciled()
        )
        for line in reconciled.messages:
            context.log.info(line)
        for n, digest in reconciled.given_up.items():
            if reported.get(n) != digest:
                context.log.warning(f"{n}: gave up reconciling gap {digest}; see the lines above")
        # a gap stays reported while its collection is covered by a run (not compared this tick)
        reported = {
            **{n: d for n, d in reported.items() if n not in reconciled.checked},
            **reconciled.given_up,
        }
        for request in reconciled.requests:
            requested[request.tags["chunkyard/collections"]] = [request.run_key, now]
        requests += reconciled.requests
        kept = generation if changed or cursor is None else cursor.generation
        new_cursor = Cursor(kept, current, requested, reported, signatures).dumps()
        if not requests:
            reason = (
                "; ".join(reconciled.waiting)
                or "no document changed since the last tick and no index is behind"
            )
            return SensorResult(skip_reason=SkipReason(reason), cursor=new_cursor)
        return SensorResult(run_requests=requests, cursor=new_cursor)

    return document_update_sensor


def change_request(
    context: SensorEvaluationContext,
    name: str,
    changes: FolderChanges,
    selection: list[AssetKey],
    previous: Mapping[str, Mapping[str, str]],
    current: Mapping[str, Mapping[str, str]],
    generation: int,
    first: bool,
) -> RunRequest:
    """The run for one collection's observed change set (its documents and every index of it);
    `first`: the tick had no cursor (of this version) and compared with the store."""
    context.log.info(
        f"{name}: {len(changes.added)} added, {len(changes.changed)} changed, {len(changes.deleted)} deleted: "
        + ", ".join([*changes.added, *changes.changed, *changes.deleted][:20])
    )
    tags = {
        **host_tags(),
        **collection_tags(name),
        "chunkyard/generation": str(generation),
        # The first tick has no cursor: it reconciles the folders with the store (cheap when
        # nothing changed: unchanged documents are neither re-chunked nor re-embedded).
        "chunkyard/trigger": "initial_scan" if first else "document_update",
        "chunkyard/added": str(len(changes.added)),
        "chunkyard/changed": str(len(changes.changed)),
        "chunkyard/deleted": str(len(changes.deleted)),
    }
    small = len(changes.added) + len(changes.changed) + len(changes.deleted) <= IN_PROCESS_MAX_CHANGED
    tags["chunkyard/executor"] = "in_process" if small else "multiprocess"
    return RunRequest(
        run_key=change_set_key({name: changes}, previous, current, generation),
        job_name=index_job_name(name),
        asset_selection=selection,
        tags=tags,
        run_config=IN_PROCESS_RUN_CONFIG if small else {},
    )


def run_reconciler(
    context: SensorEvaluationContext,
    postgres: PostgresResource,
    watched: Mapping[str, Collection],
    indexing_keys: Mapping[str, list[AssetKey]],
    index_names: Mapping[str, list[str]],
    requested: Mapping[str, list],
    now: float,
    seen: Mapping[str, Mapping[str, str]],
) -> Reconciled:
    """`assets.reconciling.reconcile` for the collections no run covers; never fails the tick."""
    try:
        prefixes = {n: indexing_keys[n][0].path[0] for n in watched}
        skip = busy_collections(context.instance, prefixes) | recently_requested(
            context.instance, requested, now
        )
        return reconcile(
            context.instance,
            postgres,
            watched,
            {n: (indexing_keys[n], index_names.get(n, [])) for n in watched},
            skip=skip,
            policy=GapBackoff.from_environment(),
            small_run_config=IN_PROCESS_RUN_CONFIG,
            small_max=IN_PROCESS_MAX_CHANGED,
            seen=seen,
        )
    except Exception as exc:  # a repair: the change-driven requests of this tick still go out
        context.log.warning(f"reconciler failed ({exc}); it tries again next tick")
        return Reconciled()


def build_janitor_sensor(
    *, name: str = JANITOR_NAME, default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING
) -> SensorDefinition:
    """Fails the runs that can never end (`assets.runs.sweep_dead_runs`) and frees their pool slots, every tick."""

    @sensor(
        name=name,
        description=(
            "Fails the runs that can never end (this host's runs whose process or creator is gone: killed, "
            "or its failure never written; any run not started within run monitoring's start timeout) and "
            "frees the concurrency-pool slots they held, so the `embedding` pool never waits for ever."
        ),
        minimum_interval_seconds=sensor_interval(),
        default_status=default_status,
    )
    def dead_run_janitor(context: SensorEvaluationContext) -> SensorResult:
        swept = sweep(context)
        if not swept:
            return SensorResult(skip_reason=SkipReason("no dead run"))
        return SensorResult(skip_reason=SkipReason(f"failed {len(swept)} dead run(s): {', '.join(swept)}"))

    return dead_run_janitor
