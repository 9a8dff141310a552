"""What a search returns (`SearchResult`) and its errors: bad input (`SearchError`) or no such index."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from chunkyard.retrieval.query.highlights import Highlight
from chunkyard.retrieval.settings.option_schema import SearchError

__all__ = ["NOTHING_INDEXED", "Highlight", "IndexNotFoundError", "SearchError", "SearchResult"]

# A database no index was built in yet is a state, not an error of the database: the one wording of it.
NOTHING_INDEXED = "nothing is indexed yet: `chunkyard index` builds the project's collections"


class IndexNotFoundError(LookupError):
    """The index does not exist or was never published."""


@dataclass
class SearchResult:
    """One chunk: its exact span in its document, text, metadata and per-stage scores."""

    chunk_id: str
    doc_id: str
    start: int
    end: int
    text: str
    metadata: dict[str, Any]
    scores: dict[str, float]
    rank: int
    parent: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    index: str = ""
    index_version: int = 0
    # Set when the document's file failed to load after it was indexed (the reason): the text
    # served is its last good version, which the file may no longer say.
    stale: str | None = None
    # The sentences that best match the query (`retrieval.query.highlights`), about 300 characters of
    # the chunk around the first of them, and the page or slide it is on (else the chunk's first).
    highlights: list[Highlight] = field(default_factory=list)
    snippet: str = ""
    page: int | None = None
    slide: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        names = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in names}
        values["highlights"] = [
            h if isinstance(h, Highlight) else Highlight.from_dict(h) for h in values.get("highlights") or []
        ]
        return cls(**values)
