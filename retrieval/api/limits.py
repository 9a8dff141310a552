"""What a caller may ask of this server: the k bound, the enabled rerankers, the query length; checked once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import MAX_K, SearchOptions


def allowed_rerankers() -> set[str]:
    """`maxsim` and the names in CHUNKYARD_ALLOWED_RERANKERS (read per request, so tests can set it)."""
    configured = os.environ.get("CHUNKYARD_ALLOWED_RERANKERS", "")
    return {"maxsim", *(name.strip() for name in configured.split(",") if name.strip())}


@dataclass(frozen=True)
class RequestLimits:
    """The bounds a search request and an alias's pinned options are both held to."""

    max_k: int
    max_query_chars: int

    def __post_init__(self) -> None:
        if not 1 <= self.max_k <= MAX_K:
            raise ValueError(f"max_k: must be between 1 and {MAX_K}, got {self.max_k}")

    def check(self, options: SearchOptions, where: str = "") -> SearchOptions:
        """`options` when this server serves them; else SearchError naming the field (`where` + name)."""
        if options.k is not None and options.k > self.max_k:
            raise SearchError(f"{where}k: at most {self.max_k} on this server, got {options.k}")
        rerankers = allowed_rerankers()
        if options.rerank is not None and options.rerank not in rerankers:
            raise SearchError(
                f"{where}rerank: {options.rerank!r} is not enabled here; allowed: {sorted(rerankers)}"
            )
        return options

    def parse(self, given: Mapping[str, Any], where: str = "") -> SearchOptions:
        """Options from a JSON object (an alias body's `options`), validated and checked."""
        try:
            options = SearchOptions.of(None, dict(given))
        except (SearchError, TypeError) as exc:
            raise SearchError(f"{where}{exc}") from None
        return self.check(options, where)

    def check_query(self, query: str) -> str:
        if len(query) > self.max_query_chars:
            raise SearchError(f"query: at most {self.max_query_chars} characters")
        return query
