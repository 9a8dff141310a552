"""Creating a key as the CLI and the service's `POST /v1/keys` do: its collections checked to exist."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.api_key import ApiKey, ApiKeyError, parse_expiry


def known_collections(store: Store) -> set[str]:
    """The collections a key may name: the project's declared ones and those the database holds."""
    from chunkyard.retrieval.settings.config import load_collections
    from chunkyard.retrieval.settings.project import ProjectError

    known = store.keys.collections_known()
    with contextlib.suppress(ProjectError):
        known |= set(load_collections())
    return known


def create_key(
    store: Store,
    name: str,
    scope: str,
    collections: Sequence[str],
    *,
    actor: str,
    expires: str | None = None,
    rate_per_s: float | None = None,
    max_concurrent: int | None = None,
) -> tuple[ApiKey, str]:
    """A new key and its token (shown once); ApiKeyError names the field at fault."""
    wanted = list(dict.fromkeys(collections))
    if wanted:
        known = known_collections(store)
        missing = [collection for collection in wanted if collection not in known]
        if missing:
            raise ApiKeyError(
                f"collection: {', '.join(repr(m) for m in missing)} does not exist"
                f" (known: {', '.join(sorted(known)) or 'none yet'})"
            )
    return store.keys.create(
        name,
        scope,
        wanted,
        actor=actor,
        expires_at=parse_expiry(expires),
        rate_per_s=rate_per_s,
        max_concurrent=max_concurrent,
    )
