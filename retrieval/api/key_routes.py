"""The admin routes for keys and the audit log: `/v1/keys` (create, list, revoke) and `/v1/audit`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from chunkyard.retrieval.api.auth import AuthError, Caller
from chunkyard.retrieval.api.common import ServiceContext, refused
from chunkyard.retrieval.api.key_admin import create_key
from chunkyard.retrieval.api.models import StrictBody, picked
from chunkyard.retrieval.store.api_key import KEY_NAME, SCOPES, ApiKeyError
from chunkyard.retrieval.store.keys import ACTIONS
from fastapi import Depends, FastAPI, HTTPException, Query
from pydantic import Field


class KeyBody(StrictBody):
    """`POST /v1/keys`: a new key's name, scope, collections, lifetime and limits."""

    name: str = Field(
        ..., min_length=1, max_length=64, description="Lowercase letters, digits, '-', '_', '.'."
    )
    scope: Literal[SCOPES] = Field(
        ..., description="`search`: search and read its collections; `admin`: all."
    )
    collections: list[str] = Field(
        default_factory=list, max_length=100, description="What a search key may read (existing collections)."
    )
    expires: str | None = Field(None, max_length=40, description="`30d`, `12h`, or an ISO date/time.")
    rate_per_s: float | None = Field(None, ge=0, le=1e6, description="Requests/s (0: none; unset: default).")
    max_concurrent: int | None = Field(None, ge=0, le=10_000, description="Searches at once (0: none).")


def add_key_routes(app: FastAPI, ctx: ServiceContext, require_key: Callable[..., Caller]) -> None:
    """`POST|GET /v1/keys`, `DELETE /v1/keys/{name}` and `GET /v1/audit` for admin keys only, and
    `GET /v1/keys/self` for any key."""
    responses = picked(400, 401, 403, 404, 503)

    def admin(caller: Caller = Depends(require_key)) -> Caller:
        try:
            caller.require_admin()
        except AuthError as exc:
            raise refused(exc) from None
        return caller

    @app.get("/v1/keys/self", responses=picked(401, 503))
    def whoami(caller: Caller = Depends(require_key)) -> dict[str, Any]:
        """The key this request carries: its name, scope and collections (null: all); how the UI proxy
        checks a stored key without a database connection of its own."""
        collections = None if caller.collections is None else sorted(caller.collections)
        return {"name": caller.name, "scope": caller.scope, "collections": collections}

    @app.post("/v1/keys", status_code=201, responses=responses)
    def create(body: KeyBody, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """A new key; the response holds its token, shown this once (only its hash is stored)."""
        try:
            key, token = create_key(
                ctx.store(),
                body.name,
                body.scope,
                body.collections,
                actor=caller.name,
                expires=body.expires,
                rate_per_s=body.rate_per_s,
                max_concurrent=body.max_concurrent,
            )
        except ApiKeyError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        return {**key.as_dict(), "token": token}

    @app.get("/v1/keys", responses=responses, dependencies=[Depends(admin)])
    def list_keys() -> list[dict[str, Any]]:
        """Every key (never a token), revoked and expired ones with their status."""
        return [key.as_dict() for key in ctx.store().keys.list()]

    @app.delete("/v1/keys/{name}", responses=responses)
    def revoke(name: str, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """Revoke a key: every service process refuses it within a second."""
        store = ctx.store()
        if not KEY_NAME.match(name) or store.keys.get(name) is None:
            raise HTTPException(status_code=404, detail=f"no key named {name!r}")
        try:
            return store.keys.revoke(name, actor=caller.name).as_dict()
        except ApiKeyError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None

    @app.get("/v1/audit", responses=responses, dependencies=[Depends(admin)])
    def audit(
        limit: int = Query(100, ge=1, le=10_000, description="The newest entries, at most this many."),
        action: Literal[ACTIONS] | None = Query(None, description="Only this action."),
        target: str | None = Query(
            None, pattern=KEY_NAME.pattern, description="Only this alias or key (their names' one shape)."
        ),
    ) -> list[dict[str, Any]]:
        """The audit log, newest first: who changed which alias or key, when, before and after."""
        return [
            entry.as_dict() for entry in ctx.store().audit.entries(limit=limit, action=action, target=target)
        ]
