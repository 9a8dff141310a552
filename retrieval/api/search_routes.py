"""`POST /v1/search`: one body becomes one `SearchRequest`; the response reports the options that ran."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from chunkyard.retrieval.api.auth import AuthError, Caller, check_read
from chunkyard.retrieval.api.common import OUTAGE_ERRORS, ServiceContext, refused, too_many
from chunkyard.retrieval.api.metrics import ServiceMetrics
from chunkyard.retrieval.api.models import ERRORS, SearchResponse, search_request
from chunkyard.retrieval.api.rate_limits import RateLimited
from chunkyard.retrieval.embedders.rerankers import RerankerConfigError
from chunkyard.retrieval.observability.telemetry import span
from chunkyard.retrieval.query import IndexNotFoundError, SearchError
from chunkyard.retrieval.settings.default_index import NoDefaultIndex
from chunkyard.retrieval.settings.names import IndexNameError
from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel

log = logging.getLogger("chunkyard.service")


def answer(ctx: ServiceContext, body: BaseModel) -> SearchResponse:
    """One parsed body's response: its `SearchRequest` run, with the options that ran."""
    started = time.perf_counter()
    try:
        ctx.limits.check_query(body.query)
        request = search_request(body)
        ctx.limits.check(request.options)
        try:
            results, plan = ctx.searcher().run(request)
        except OUTAGE_ERRORS as exc:  # a connection the restart broke: the pool is refilled, once more
            log.warning("search: %s: %s; retrying once", type(exc).__name__, exc)
            results, plan = ctx.searcher().run(request)
    except (IndexNotFoundError, NoDefaultIndex) as exc:
        raise HTTPException(status_code=404, detail=str(exc).strip("'\"")) from exc
    except (SearchError, RerankerConfigError, IndexNameError) as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from exc
    return SearchResponse(
        index=results[0].index if results else str(request.ref),
        mode=plan.mode,  # what ran: an alias's pinned mode and k, not the request's defaults
        k=plan.k,
        results=results,
        took_ms=round((time.perf_counter() - started) * 1000, 3),
    )


def add_search_routes(
    app: FastAPI,
    ctx: ServiceContext,
    body_model: type[BaseModel],
    require_key: Callable[..., Caller],
    metrics: ServiceMetrics | None = None,
) -> None:
    """`POST /v1/search`, its body `body_model` (the app's k limit): what the caller's key may read,
    within its concurrent searches, its stage timings counted in `metrics`."""

    def search(body: BaseModel, request: Request, caller: Caller = Depends(require_key)) -> SearchResponse:
        """Top-k chunks with exact spans, per-stage scores and timings."""
        with span("chunkyard.search", **{"chunkyard.index": body.index}) as current:
            try:
                check_read(caller, body.index, ctx.store())
                with ctx.rate_limiter.search_slot(caller.name, caller.limits):
                    response = answer(ctx, body)
            except AuthError as exc:
                raise refused(exc) from None
            except RateLimited as exc:
                raise too_many(exc) from None
            current.set_attribute("chunkyard.mode", response.mode)
        if metrics is not None:
            served = response.index.split("@")[0]  # an alias's snapshot counts as its index
            request.state.metrics_index, request.state.metrics_mode = served, response.mode
            if response.results:
                metrics.observe_search(served, response.mode, response.results[0].timings)
        return response

    search.__annotations__["body"] = body_model  # this app's model (its k limit), not a name
    app.post("/v1/search", response_model=SearchResponse, responses=ERRORS)(search)
