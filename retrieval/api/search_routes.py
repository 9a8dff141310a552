"""`POST /v1/search`: one body becomes one `SearchRequest`; the response reports the options that ran."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from chunkyard.retrieval.api.common import OUTAGE_ERRORS, ServiceContext
from chunkyard.retrieval.api.models import ERRORS, SearchResponse, search_request
from chunkyard.retrieval.default_index import NoDefaultIndex
from chunkyard.retrieval.names import IndexNameError
from chunkyard.retrieval.query import IndexNotFoundError, SearchError
from chunkyard.retrieval.rerankers import RerankerConfigError
from fastapi import Depends, FastAPI, HTTPException
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
    app: FastAPI, ctx: ServiceContext, body_model: type[BaseModel], require_key: Callable[..., None]
) -> None:
    """`POST /v1/search`, its body `body_model` (the app's k limit)."""

    def search(body: BaseModel) -> SearchResponse:
        """Top-k chunks with exact spans, per-stage scores and timings."""
        return answer(ctx, body)

    search.__annotations__["body"] = body_model  # this app's model (its k limit), not a name
    app.post(
        "/v1/search", response_model=SearchResponse, dependencies=[Depends(require_key)], responses=ERRORS
    )(search)
