"""The service's JSON bodies: the search request derived from `SearchOptions`, the response, the errors."""

from __future__ import annotations

from typing import Any, Literal

from chunkyard.retrieval.api.http_guards import check_json_values
from chunkyard.retrieval.query import SearchResult
from chunkyard.retrieval.settings.default_index import named
from chunkyard.retrieval.settings.filters import operator_error
from chunkyard.retrieval.settings.names import IndexRef
from chunkyard.retrieval.settings.option_schema import NAME, OptionSchema
from chunkyard.retrieval.settings.options import SERVICE_MAX_K, SearchOptions, SearchRequest, option_schemas
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

DEFAULT_MAX_K = SERVICE_MAX_K

_WIRE_TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "bool": bool,
    "object": dict[str, Any],
    "reranker": str,
    "name": str,
}


class StrictBody(BaseModel):
    """No coercion (`"5"`, `true` and `0` are not k or a bool), no unknown fields, no unencodable values."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _encodable_values(cls, data: Any) -> Any:
        check_json_values(data)  # no NUL, lone surrogate or NaN reaches Postgres
        refused = operator_error(data.get("filters")) if isinstance(data, dict) else None
        if refused:  # a 422 like any other field the body cannot have
            raise ValueError(refused)
        return data


def _request_field(schema: OptionSchema, max_k: int) -> tuple[Any, Any]:
    """A pydantic field for one search option: its JSON type, default, request bounds and description.

    The default is documented (OpenAPI), never sent on: a field the body leaves out stays unset
    (`exclude_unset`), so an alias's pinned value or the index's default applies."""
    wire = Literal[schema.choices] if schema.kind == "choice" else _WIRE_TYPES[schema.kind]
    bounds: dict[str, Any] = {"pattern": f"^{NAME.pattern}$"} if schema.kind == "name" else {}
    if schema.kind in ("int", "float"):
        bounds = {"ge": schema.ge, "le": max_k if schema.name == "k" else schema.request_bound}
        if schema.kind == "float":
            bounds["allow_inf_nan"] = False
    return (
        wire | None if schema.nullable else wire,
        Field(schema.default, description=schema.help, **bounds),
    )


def request_model(max_k: int = DEFAULT_MAX_K) -> type[BaseModel]:
    """The search body (`SearchBody`, its OpenAPI schema too): the query, the index, and every field of
    SearchOptions (derived, never listed); `search_request` turns it into the library's `SearchRequest`."""
    return create_model(
        "SearchBody",
        __base__=StrictBody,
        # emptiness is the searcher's check, so the service and in-process say it alike
        query=(str, Field(description="The question or keywords (not blank).")),
        index=(
            str | None,
            Field(
                None,
                min_length=1,
                max_length=200,
                description="`collection/config`, a bare config name, or an alias; left out, the "
                "project's default index (`retrieval.settings.default_index`).",
            ),
        ),
        **{schema.name: _request_field(schema, max_k) for schema in option_schemas()},
    )


SearchBody = request_model()


def search_request(body: BaseModel) -> SearchRequest:
    """The library's one search value from a parsed body: only the options the caller set."""
    given = body.model_dump(exclude_unset=True, exclude={"query", "index"})
    return SearchRequest(body.query, IndexRef.of(named(body.index)), SearchOptions(**given))


class SearchResponse(BaseModel):
    index: str
    mode: str
    k: int
    results: list[SearchResult]
    took_ms: float


class ErrorResponse(BaseModel):
    detail: str


def error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: error("A value the searcher rejects (k over this server's limit, a blank query, ...)."),
    401: error("Missing or wrong API key (when the server has one)."),
    403: error("The key's scope or collections do not allow this."),
    429: error("The key is over its rate or concurrent-search limit; see Retry-After."),
    413: error("The request body is over the server's cap."),
    415: error("The body is not JSON."),
    503: error("The database is unavailable, or the service is at capacity; retry after `Retry-After`."),
}


def picked(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: ERRORS[code] for code in codes if code in ERRORS}
