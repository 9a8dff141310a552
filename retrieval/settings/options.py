"""Search options: every per-request option declared once, with its default, bounds and description.

`SearchOptions` is the one value a search's options travel in, from the HTTP body, the CLI flags,
`Client.search`, an alias's pinned options and an evaluation, down to the Searcher. Every field is
optional (None: unset), so an explicit `k=5` differs from the default and merging is defined:
`request.over(alias)` keeps the request's set fields over the alias's, and `resolve` fills the rest
from the index's config (`IndexDefaults`) and the built-in defaults (`OptionSchema.default`) into the
`ResolvedSearch` every stage reads. The HTTP request model (`retrieval.api`), the `chunkyard
search` flags and `Client.search` are derived from the fields' metadata (`option_schemas()`), so
adding an option means one field here and the stage that uses it. `SearchRequest` is one search:
the query, the `IndexRef` it names and its options.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chunkyard.retrieval.settings.index_defaults import (
    AUTO_WEIGHT,
    MAX_FOCUS_SIZE,
    MAX_NEIGHBOURS,
    MAX_RRF_K,
    CoarseFallback,
    ContextConfigError,
    ContextScoring,
    IndexDefaults,
)
from chunkyard.retrieval.settings.names import IndexRef
from chunkyard.retrieval.settings.option_schema import OptionSchema, SearchError, option_field

if TYPE_CHECKING:
    from chunkyard.retrieval.embedders.rerankers import Reranker

MODES = ("dense", "bm25", "hybrid", "hybrid_weighted", "hybrid_auto")
# What a request that names no mode gets: `hybrid_auto`, the fusion that calibrates its dense weight
# per query and per index language (retrieval/query/fusion.py; numbers in benchmarks/results/defaults.md).
DEFAULT_MODE = "hybrid_auto"
MAX_K = 1000  # the library's bound on k and candidates (evaluation reads deep lists)
# The one bound on the k a person or a remote caller asks for: the HTTP request model (so OpenAPI),
# `chunkyard search` and the errors all show it. 100 results are more than any reader looks at, and
# k sizes the reranker's and MMR's work and the response (up to ~200 KB of chunk text), which a
# service must bound; `create_app(max_k=...)` may lower it further, never past MAX_K.
REQUEST_MAX_K = 100
SERVICE_MAX_K = REQUEST_MAX_K  # the service's default (kept name)
HNSW_MAX_EF = 1000  # pgvector's upper bound for hnsw.ef_search
MAX_CONTEXT_TOKENS = 200_000  # the largest LLM context windows in common use
LLM_TOKENIZERS = ("cl100k_base", "o200k_base")  # built in, read offline (chunking/llm_encodings.py)


@dataclass(frozen=True)
class SearchOptions:
    """Every per-request search option, each None until set (then: an alias's, the index config's or
    the built-in default, in that order; see `over` and `resolve`).

    `SearchOptions(k=10, mode="dense")` validates on construction; `options.with_overrides(k=3)`
    returns a validated copy.
    """

    k: int | None = option_field(
        5, "Number of results.", "int", ge=1, le=MAX_K, request_le=REQUEST_MAX_K, flags=("-k",)
    )
    mode: str | None = option_field(
        DEFAULT_MODE,
        "dense, bm25, hybrid (RRF), hybrid_weighted, or hybrid_auto (weighted, dense weight calibrated per "
        "query and index language).",
        "choice",
        choices=MODES,
    )
    rerank: str | Reranker | None = option_field(
        None,
        "Second-stage reranker: `maxsim`, or `cross-encoder:<local path>`.",
        "reranker",
        error="expected a reranker name ('maxsim', 'cross-encoder:<path>') or object",
    )
    filters: dict[str, Any] | None = option_field(
        None,
        "Chunk metadata must contain this JSON object.",
        "object",
        error="must be a JSON object matched against chunk metadata (containment)",
    )
    include_parent: bool | None = option_field(False, "Attach each hierarchical chunk's parent span.", "bool")
    mmr: float | None = option_field(
        None, "Maximal marginal relevance lambda (1 = relevance only).", "float", ge=0, le=1
    )
    candidates: int | None = option_field(
        None,
        "First-stage candidates per list (index default: hybrid.candidates).",
        "int",
        ge=1,
        le=MAX_K,
        index_default=True,
    )
    rrf_k: int | None = option_field(
        None,
        "RRF constant of `hybrid` (index default: hybrid.rrf_k).",
        "int",
        ge=1,
        le=MAX_RRF_K,
        index_default=True,
    )
    weight: float | None = option_field(
        None,
        "Dense weight of `hybrid_weighted` (index default: hybrid.weight).",
        "float",
        ge=0,
        le=1,
        index_default=True,
    )
    ef_search: int | None = option_field(
        None, "HNSW candidate list (raised to the candidates).", "int", ge=1, le=HNSW_MAX_EF
    )
    context_weight: float | None = option_field(
        None, "Weight of the text around each chunk (0 = off).", "float", ge=0, le=1, index_default=True
    )
    context_neighbours: int | None = option_field(
        None,
        "Chunks on each side that form a chunk's context.",
        "int",
        ge=1,
        le=MAX_NEIGHBOURS,
        index_default=True,
    )
    focus_weight: float | None = option_field(
        None, "Weight of each chunk's best window.", "float", ge=0, le=1, index_default=True
    )
    focus_size: int | None = option_field(
        None, "Window length in BM25 terms.", "int", ge=1, le=MAX_FOCUS_SIZE, index_default=True
    )
    collapse_duplicates: bool | None = option_field(
        None, "Identical chunk texts take one slot.", "bool", index_default=True
    )
    highlights: bool | None = option_field(
        True, "Mark the sentences of each hit that best match the query, with their page or slide.", "bool"
    )
    coarse_min_gap: float | None = option_field(
        None,
        "Answer from the coarse index below this ranking gap (0 = never).",
        "float",
        ge=0,
        le=1,
        index_default=True,
    )
    max_context_tokens: int | None = option_field(
        None,
        "Trim the results to this many LLM tokens in all (whole results first, then best sentences).",
        "int",
        ge=1,
        le=MAX_CONTEXT_TOKENS,
    )
    llm_tokenizer: str | None = option_field(
        None,
        "The LLM tokenizer max_context_tokens counts in: cl100k_base (default), o200k_base (GPT-4o) or a "
        "name of the project's llm_tokenizers (its LLM's own tokenizer.json).",
        "name",
        error="a tokenizer's name: cl100k_base, o200k_base or one of the project's llm_tokenizers",
    )
    trust_dense: bool | None = option_field(
        None,
        "hybrid_auto: at least 1.4x the base dense weight when BM25's top 10 hold dense's best chunk "
        "(index default: hybrid.trust_dense, else off).",
        "bool",
        index_default=True,
    )
    bm25_feedback: bool | None = option_field(
        False,
        "Expand the BM25 query with the best terms of its own top chunks (pseudo-relevance feedback).",
        "bool",
    )
    section_tokens: int | None = option_field(
        None,
        "Small-to-big: return each hit's section (from its heading), at most this many LLM tokens around the hit.",
        "int",
        ge=1,
        le=MAX_CONTEXT_TOKENS,
    )

    def __post_init__(self) -> None:
        for schema in option_schemas():
            object.__setattr__(self, schema.name, schema.check(getattr(self, schema.name)))

    @classmethod
    def of(
        cls, options: SearchOptions | None = None, overrides: Mapping[str, Any] | None = None
    ) -> SearchOptions:
        """`options` (default: all defaults) with keyword `overrides`, validated; unknown names are errors."""
        if options is not None and not isinstance(options, SearchOptions):
            raise SearchError(
                f"options: expected SearchOptions or None, got {type(options).__name__} "
                "(pass k, mode and the other options as keywords)"
            )
        base = options or cls()
        if not overrides:
            return base
        unknown = sorted(set(overrides) - set(option_names()))
        if unknown:
            raise SearchError(f"{unknown[0]}: not a search option; known: {', '.join(option_names())}")
        return dataclasses.replace(base, **overrides)

    def with_overrides(self, **overrides: Any) -> SearchOptions:
        return SearchOptions.of(self, overrides)

    def over(self, base: SearchOptions) -> SearchOptions:
        """These options, with `base`'s (an alias's pinned options) where these are unset."""
        return dataclasses.replace(base, **self.given())

    def request_only(self) -> SearchOptions:
        """These options without the ones that override an index setting (a coarse index keeps its own)."""
        return dataclasses.replace(
            self, **{schema.name: None for schema in option_schemas() if schema.index_default}
        )

    def given(self) -> dict[str, Any]:
        """The options that are set (not None), by name: the body `Client.search` sends, an alias stores."""
        return {name: getattr(self, name) for name in option_names() if getattr(self, name) is not None}

    # -- command line ----------------------------------------------------------------------------

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """One flag per option (`--context-weight 0.4`), absent unless given."""
        for schema in option_schemas():
            names, settings = schema.argument()
            parser.add_argument(*names, **settings)

    @classmethod
    def from_arguments(cls, namespace: argparse.Namespace) -> SearchOptions:
        """The options given on the command line (see `add_arguments`)."""
        given = {name: getattr(namespace, name) for name in option_names() if hasattr(namespace, name)}
        return cls.of(None, given)

    # -- resolution ------------------------------------------------------------------------------

    def resolve(self, defaults: IndexDefaults, index_name: str) -> ResolvedSearch:
        """These options with the index's defaults, then the built-in ones, filled in, checked together."""
        candidates = self.candidates if self.candidates is not None else defaults.candidates
        if not 1 <= candidates <= MAX_K:
            raise SearchError(f"candidates: must be between 1 and {MAX_K}, got {candidates}")
        weight = float(self.weight if self.weight is not None else defaults.weight)
        if not 0.0 <= weight <= 1.0:
            raise SearchError(f"weight: dense weight must be between 0 and 1, got {weight}")
        context = defaults.context
        overrides = {
            "weight": self.context_weight,
            "neighbours": self.context_neighbours,
            "focus_weight": self.focus_weight,
            "focus_size": self.focus_size,
        }
        given = {name: value for name, value in overrides.items() if value is not None}
        if given:
            merged = {**context.as_dict(), **given}
            try:
                context = ContextScoring.checked(**merged, where="context")
            except ContextConfigError as exc:
                raise SearchError(str(exc)) from exc
        if self.coarse_min_gap is not None and defaults.coarse is None:
            raise SearchError(f"coarse_min_gap: index {index_name!r} has no `coarse` index config")
        coarse = defaults.coarse
        if coarse is not None and self.coarse_min_gap is not None:
            coarse = dataclasses.replace(coarse, min_gap=self.coarse_min_gap)
        return ResolvedSearch(
            options=self,
            k=self.k if self.k is not None else _SCHEMA_OF["k"].default,
            mode=self.mode if self.mode is not None else _SCHEMA_OF["mode"].default,
            rerank=self.rerank,
            filters=self.filters,
            include_parent=bool(self.include_parent),
            mmr=self.mmr,
            ef_search=self.ef_search,
            candidates=int(candidates),
            rrf_k=float(self.rrf_k if self.rrf_k is not None else defaults.rrf_k),
            weight=weight,
            auto_weight=defaults.auto_weight,
            trust_dense=self.trust_dense if self.trust_dense is not None else defaults.trust_dense,
            context=context,
            collapse=self.collapse_duplicates if self.collapse_duplicates is not None else defaults.collapse,
            coarse=coarse,
            highlights=self.highlights is not False,
            max_context_tokens=self.max_context_tokens,
            llm_tokenizer=self.llm_tokenizer or LLM_TOKENIZERS[0],
            bm25_feedback=bool(self.bm25_feedback),
            section_tokens=self.section_tokens,
        )


def option_schemas() -> tuple[OptionSchema, ...]:
    """Every option's schema, in field order."""
    return _SCHEMAS


def option_names() -> tuple[str, ...]:
    return tuple(schema.name for schema in _SCHEMAS)


_SCHEMAS = tuple(OptionSchema(name=f.name, **f.metadata["option"]) for f in dataclasses.fields(SearchOptions))
_SCHEMA_OF = {schema.name: schema for schema in _SCHEMAS}


def default_of(name: str) -> Any:
    """The built-in default of option `name` (what an unset option gets when the index has none)."""
    return _SCHEMA_OF[name].default


@dataclass(frozen=True)
class SearchRequest:
    """One search: the query, what it names (an alias or an index) and the options the caller set."""

    query: str
    ref: IndexRef
    options: SearchOptions = field(default_factory=SearchOptions)

    @classmethod
    def of(
        cls,
        query: str,
        ref: IndexRef | str,
        options: SearchOptions | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> SearchRequest:
        """`options` with keyword `overrides` (see `SearchOptions.of`), for the index or alias `ref`."""
        return cls(query, IndexRef.of(ref), SearchOptions.of(options, overrides))


@dataclass(frozen=True)
class ResolvedSearch:
    """The options that run: the request's (over an alias's), the index's defaults and the built-in
    ones filled in. What the stages read and what the response reports."""

    options: SearchOptions  # as set by the caller (and alias): a coarse index re-resolves them
    k: int
    mode: str
    rerank: str | Reranker | None
    filters: dict[str, Any] | None
    include_parent: bool
    mmr: float | None
    ef_search: int | None
    candidates: int
    rrf_k: float
    weight: float
    context: ContextScoring
    collapse: bool
    coarse: CoarseFallback | None
    auto_weight: float = AUTO_WEIGHT  # hybrid_auto's base dense weight (`auto_weight(config)`)
    highlights: bool = True  # each hit's best-matching sentences (`retrieval.query.highlights`)
    max_context_tokens: int | None = None  # the results trimmed to this many LLM tokens (None: whole)
    llm_tokenizer: str = LLM_TOKENIZERS[0]
    trust_dense: bool = False  # hybrid_auto trusts a dense top hit BM25 confirms (`fusion.trusted_weight`)
    bm25_feedback: bool = False  # pseudo-relevance feedback for BM25 (`retrieval.query.feedback`)
    section_tokens: int | None = None  # small-to-big: each hit's section, capped (`retrieval.query.sections`)

    @property
    def falls_back(self) -> bool:
        """Ambiguous queries are answered by the coarse index (`min_gap` 0 never falls back)."""
        return self.coarse is not None and self.coarse.min_gap > 0.0
