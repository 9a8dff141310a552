"""The service's status routes: `/healthz`, `/readyz` (warm, database, embedding endpoint), `/v1/indexes`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from chunkyard.retrieval.api.auth import Caller
from chunkyard.retrieval.api.common import ENDPOINT_UNAVAILABLE, UNAVAILABLE, ServiceContext
from chunkyard.retrieval.api.key_check import presented_key
from chunkyard.retrieval.api.models import error, picked
from chunkyard.retrieval.embedders.endpoint_settings import EndpointError, endpoint_identity
from chunkyard.retrieval.indexing.lag import index_lag
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.results import NOTHING_INDEXED
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import verify_server
from chunkyard.retrieval.store.indexes import schema_and_published
from chunkyard.retrieval.store.server import DatabaseSelfCheckError
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse

log = logging.getLogger("chunkyard.service")
# The per-variant metric means `/v1/indexes` shows by default (`?full=true` gives the whole report).
HEADLINE_METRICS = ("hit_at_{k}", "mrr_at_{k}", "recall_at_{k}", "precision_at_{k}", "iou_at_{k}")


def headline(report: dict[str, Any] | None) -> dict[str, float]:
    """`{variant}/{metric}` means of the headline metrics in a stored evaluation report dict."""
    if not isinstance(report, dict):
        return {}
    k = report.get("k", 5)
    names = [template.format(k=k) for template in HEADLINE_METRICS]
    out: dict[str, float] = {}
    for variant, summary in (report.get("summaries") or {}).items():
        overall = (summary or {}).get("overall") or {}
        for name in names:
            mean = (overall.get(name) or {}).get("mean")
            if isinstance(mean, int | float):
                out[f"{variant}/{name}"] = round(float(mean), 4)
    return out


def _index_summary(info: dict[str, Any]) -> dict[str, Any]:
    """An index as `/v1/indexes` lists it by default: its facts and its evaluation's headline means."""
    evaluation = info.get("latest_evaluation")
    summary = {key: value for key, value in info.items() if key not in ("config", "latest_evaluation")}
    summary["latest_evaluation"] = (
        None
        if evaluation is None
        else {
            **{key: value for key, value in evaluation.items() if key != "report"},
            "headline": headline(evaluation.get("report")),
        }
    )
    return summary


SELF_CHECK_FAILED = "the database failed chunkyard's self-check; the service log says why"
# What `/readyz` tells a caller without the key (when the service has one): no versions, no counts.
ANONYMOUS_FIELDS = ("status", "detail", "dependencies")


def _self_check_failed(error: DatabaseSelfCheckError, detailed: bool = True) -> JSONResponse:
    """The database cannot run pgvector's operators: not an outage that passes, so say what and why
    (to a caller holding the key; the versions it names are not for anyone else)."""
    if not detailed:
        return JSONResponse({"status": "failed", "detail": SELF_CHECK_FAILED}, status_code=503)
    return JSONResponse({"status": "failed", "detail": str(error), "hint": error.hint}, status_code=503)


def _published_state(store: Store) -> tuple[int, int]:
    """The schema version and the number of published indexes; (0, 0) before anything was indexed."""
    with store.connection() as conn:
        try:
            return schema_and_published(conn)
        except psycopg.errors.UndefinedTable:
            return 0, 0


class Readiness:
    """Ready once the model and the BM25 copies of every published index are loaded (warm), or at once."""

    def __init__(self, warm: bool | Sequence[str]) -> None:
        self.warm = warm
        self.done = threading.Event()
        self.failure = ""
        self.fatal: DatabaseSelfCheckError | None = None  # a verdict, not an outage: no more retries
        if not warm:
            self.done.set()

    def run(self, searcher: Searcher, retry_s: float = 2.0) -> None:
        """Warm until it succeeds (a database that is down now may be up later)."""
        while not self.done.is_set():
            try:
                started = time.perf_counter()
                names = self._names(searcher)
                for name, config in names:
                    try:
                        searcher.embedder(name, config).embed(["warm up"])
                    except EndpointError as exc:  # /readyz reports it; BM25 searches still serve
                        log.warning("warm: %s: embedding endpoint: %s", name, exc)
                    if searcher.bm25_backend == "memory":
                        searcher.warm(name)
                log.info("warm: %d index(es) in %.1f s", len(names), time.perf_counter() - started)
                self.done.set()
            except DatabaseSelfCheckError as exc:
                self.fatal = exc
                log.error("warming stopped: %s (%s)", exc, exc.hint)
                return
            except Exception as exc:
                self.failure = type(exc).__name__
                log.warning("warming failed (%s); retrying in %.0f s", exc, retry_s)
                time.sleep(retry_s)

    def endpoint_problems(self, searcher: Searcher) -> dict[str, str] | None:
        """Per published index served by an embedding server: '' when it answers a probe (checked at
        most every few seconds), else why not; None when no index uses one."""
        served = [
            (n, c) for n, c in self._names(searcher, every=True) if endpoint_identity(c.get("embedder") or {})
        ]
        if not served:
            return None
        return {name: searcher.embedder(name, config).unavailable() for name, config in served}

    def _names(self, searcher: Searcher, every: bool = False) -> list[tuple[str, dict[str, Any]]]:
        wanted = None if self.warm is True or every else set(self.warm)
        return [
            (info["name"], info["config"] or {})
            for info in searcher.store.indexes.list()
            if info["version"] and (wanted is None or info["name"] in wanted)
        ]


def add_status_routes(
    app: FastAPI, ctx: ServiceContext, readiness: Readiness, require_key: Callable[..., Caller]
) -> None:
    """`GET /healthz`, `GET /readyz` and `GET /v1/indexes` (behind the key)."""

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: error("Warming up, or the database is unavailable.")})
    def readyz(request: Request) -> JSONResponse:
        """The model and BM25 copies are loaded, the database answers and its schema is migrated.

        With an index on an embedding server, `dependencies` says whether it answers a probe; when it
        does not, the status is `degraded` but the code stays 200 (BM25 searches still work). The
        schema version, the database's versions and the index count are shown only to a caller
        holding the key or a stored admin key (or by a service without one)."""
        detailed = ctx.holds_admin_key(presented_key(request))
        if readiness.fatal is not None:
            return _self_check_failed(readiness.fatal, detailed)
        if not readiness.done.is_set():
            return JSONResponse(
                {"status": "warming", "detail": "loading the model and the BM25 copies"}, status_code=503
            )
        try:
            store = ctx.searcher().store
            version, published = _published_state(store)
            database = verify_server(store.url).describe()
        except DatabaseSelfCheckError as exc:
            return _self_check_failed(exc, detailed)
        except Exception as exc:  # not ready: the reason goes to the log, not to an anonymous caller
            log.error("readyz: %s: %s", type(exc).__name__, exc)
            return JSONResponse({"status": "unavailable", "detail": UNAVAILABLE}, status_code=503)
        body: dict[str, Any] = {
            "status": "ready",
            "schema_version": version,
            "database": database,
            "indexes": published,
        }
        if not published:
            body["detail"] = NOTHING_INDEXED
        problems = readiness.endpoint_problems(ctx.searcher())
        if problems is not None:  # an embedding server is a dependency of the indexes it serves
            down = {name: problem for name, problem in problems.items() if problem}
            body["dependencies"] = {"database": "ok", "embedding_endpoint": "unavailable" if down else "ok"}
            if down:  # still 200: BM25 searches work, and every replica shares the endpoint
                log.error("readyz: embedding endpoint: %s", "; ".join(f"{n}: {p}" for n, p in down.items()))
                body.update(status="degraded", detail=ENDPOINT_UNAVAILABLE)
        if not detailed:
            body = {key: value for key, value in body.items() if key in ANONYMOUS_FIELDS}
            if body["status"] == "ready":  # its only detail, "nothing indexed", is a count
                body.pop("detail", None)
        return JSONResponse(body)

    @app.get("/v1/indexes", responses=picked(401, 503))
    def indexes(
        full: bool = Query(False, description="The whole config and evaluation report of each index."),
        caller: Caller = Depends(require_key),
    ) -> list[dict[str, Any]]:
        """Every index the key may read: version, sizes and its latest evaluation's headline means
        (`?full=true`: all)."""
        store = ctx.searcher().store
        listed = [info for info in store.indexes.list() if caller.may_read(info["collection"])]
        for info in listed:  # documents behind and the oldest unindexed change (retrieval.indexing.lag)
            info["lag"] = index_lag(store, info["name"], info["collection"]).as_dict()
        return listed if full else [_index_summary(info) for info in listed]
