"""The alias routes of the query service: list, show, pin (`PUT`) and roll back serving aliases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chunkyard.retrieval.api.auth import AuthError, Caller
from chunkyard.retrieval.api.common import ServiceContext, refused
from chunkyard.retrieval.api.models import StrictBody, picked
from chunkyard.retrieval.query import aliases
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.store import Store
from fastapi import Depends, FastAPI, HTTPException
from pydantic import Field


class AliasBody(StrictBody):
    """`PUT /v1/aliases/{name}`: the index it serves and the search options it pins.

    `options` is the JSON object of a search body's option fields (parsed into `SearchOptions` and
    held to the same limits as a search, by `RequestLimits.parse`)."""

    index: str = Field(..., min_length=1, max_length=200, description="`collection/config`, published.")
    options: dict[str, Any] = Field(
        default_factory=dict, description='Search options, e.g. {"mode": "hybrid_weighted", "weight": 0.3}.'
    )
    note: str = Field("", max_length=500, description="Why (kept in the alias's history).")
    keep: int | None = Field(None, ge=1, le=1000, description="Earlier targets kept for rollback.")


def add_alias_routes(app: FastAPI, ctx: ServiceContext, require_key: Callable[..., Caller]) -> None:
    """`GET /v1/aliases`, `GET|PUT /v1/aliases/{name}`, `POST /v1/aliases/{name}/rollback`.

    A search key sees only the aliases serving its collections; setting and rolling back need an
    admin key and are written to the audit log under its name. An alias set here keeps to what a
    search request may ask for (`ctx.limits`: k, the enabled rerankers), since its options are
    served to every request that names it."""
    responses = picked(400, 401, 403, 404, 503)
    store = ctx.store

    @app.get("/v1/aliases", responses=responses)
    def list_aliases(caller: Caller = Depends(require_key)) -> list[dict[str, Any]]:
        """Every alias the key may read and its current target."""
        listed = aliases.list_aliases(store())
        return [target.as_dict() for target in listed if caller.may_read(target.index.collection)]

    @app.get("/v1/aliases/{name}", responses=responses)
    def show_alias(name: str, caller: Caller = Depends(require_key)) -> dict[str, Any]:
        """The alias's current target and the earlier ones it can roll back to (newest first)."""
        current = _existing(store(), name, caller)
        return {**current.as_dict(), "history": [t.as_dict() for t in aliases.history(store(), name)]}

    @app.put("/v1/aliases/{name}", responses=responses)
    def put_alias(name: str, body: AliasBody, caller: Caller = Depends(require_key)) -> dict[str, Any]:
        """Point the alias at an index (atomically for readers) with the options it pins (admin)."""
        _admin(caller)
        try:
            options = ctx.limits.parse(body.options, where="options.")
            target = aliases.set_alias(
                store(), name, body.index, options, note=body.note, keep=body.keep, actor=caller.name
            )
        except (SearchError, aliases.AliasError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return target.as_dict()

    @app.post("/v1/aliases/{name}/rollback", responses=responses)
    def rollback_alias(name: str, caller: Caller = Depends(require_key)) -> dict[str, Any]:
        """Return the alias to the target it had before its current one (admin)."""
        _admin(caller)
        _existing(store(), name, caller)
        try:
            return aliases.rollback(store(), name, actor=caller.name).as_dict()
        except aliases.AliasError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc


def _admin(caller: Caller) -> None:
    try:
        caller.require_admin()
    except AuthError as exc:
        raise refused(exc) from None


def _existing(store: Store, name: str, caller: Caller) -> aliases.AliasTarget:
    """The alias, or 404 when it does not exist or serves a collection the key may not read."""
    try:
        target = aliases.get_alias(store, name)
    except aliases.AliasError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from exc
    if target is None or not caller.may_read(target.index.collection):
        raise HTTPException(status_code=404, detail=f"alias {name!r} does not exist")
    return target
