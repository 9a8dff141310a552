"""The alias routes of the query service: list, show, pin (`PUT`) and roll back serving aliases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field, model_validator

from retrieval import aliases
from retrieval.http_guards import check_json_values
from retrieval.store import Store


class AliasRequest(BaseModel):
    """`PUT /v1/aliases/{name}`: the index it serves and the search options that become its defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    index: str = Field(..., min_length=1, max_length=200, description="`collection/config`, published.")
    options: dict[str, Any] = Field(
        default_factory=dict, description='Search options, e.g. {"mode": "hybrid_weighted", "weight": 0.3}.'
    )
    note: str = Field("", max_length=500, description="Why (kept in the alias's history).")
    keep: int | None = Field(None, ge=1, le=1000, description="Earlier targets kept for rollback.")

    @model_validator(mode="before")
    @classmethod
    def _encodable_values(cls, data: Any) -> Any:
        check_json_values(data)  # no NUL, lone surrogate or NaN reaches Postgres
        return data


def add_alias_routes(
    app: FastAPI,
    store: Callable[[], Store],
    require_key: Callable[..., None],
    errors: dict[int, Any],
    *,
    max_k: int,
    rerankers: Callable[[], set[str]],
) -> None:
    """`GET /v1/aliases`, `GET|PUT /v1/aliases/{name}`, `POST /v1/aliases/{name}/rollback`.

    An alias set here keeps to what a search request may ask for: k up to `max_k`, a reranker
    among `rerankers()` (its options are served to every request that names it)."""
    protected = [Depends(require_key)]
    picked = {code: errors[code] for code in (400, 401, 404, 503) if code in errors}

    @app.get("/v1/aliases", dependencies=protected, responses=picked)
    def list_aliases() -> list[dict[str, Any]]:
        """Every alias and its current target."""
        return [target.as_dict() for target in aliases.list_aliases(store())]

    @app.get("/v1/aliases/{name}", dependencies=protected, responses=picked)
    def show_alias(name: str) -> dict[str, Any]:
        """The alias's current target and the earlier ones it can roll back to (newest first)."""
        current = _existing(store(), name)
        return {**current.as_dict(), "history": [t.as_dict() for t in aliases.history(store(), name)]}

    @app.put("/v1/aliases/{name}", dependencies=protected, responses=picked)
    def put_alias(name: str, request: AliasRequest) -> dict[str, Any]:
        """Point the alias at an index (atomically for readers); the options become its request defaults."""
        k, rerank = request.options.get("k"), request.options.get("rerank")
        if isinstance(k, int) and k > max_k:
            raise HTTPException(status_code=400, detail=f"options.k: at most {max_k} on this server, got {k}")
        if rerank is not None and not isinstance(rerank, str):
            raise HTTPException(status_code=400, detail="options.rerank: expected a reranker name")
        if rerank is not None and rerank not in rerankers():
            raise HTTPException(
                status_code=400,
                detail=f"options.rerank: {rerank!r} is not enabled here; allowed: {sorted(rerankers())}",
            )
        try:
            target = aliases.set_alias(
                store(), name, request.index, request.options, note=request.note, keep=request.keep
            )
        except aliases.AliasError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return target.as_dict()

    @app.post("/v1/aliases/{name}/rollback", dependencies=protected, responses=picked)
    def rollback_alias(name: str) -> dict[str, Any]:
        """Return the alias to the target it had before its current one."""
        _existing(store(), name)
        try:
            return aliases.rollback(store(), name).as_dict()
        except aliases.AliasError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc


def _existing(store: Store, name: str) -> aliases.AliasTarget:
    try:
        target = aliases.get_alias(store, name)
    except aliases.AliasError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from exc
    if target is None:
        raise HTTPException(status_code=404, detail=f"alias {name!r} does not exist")
    return target
