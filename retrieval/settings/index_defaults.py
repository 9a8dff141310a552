"""Index-level search defaults: what an index config says about ranking, parsed once per version.

The `hybrid`, `context_scoring`, `collapse_duplicates` and `coarse` sections of an index config
become an `IndexDefaults` when the index is first queried at a version (`retrieval.query.handles`),
so no stage validates raw dicts at query time; `SearchOptions.resolve` merges them with a request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkyard.chunking.models import MODEL_LANGUAGES

MAX_NEIGHBOURS = 20
MAX_FOCUS_SIZE = 1000
MAX_RRF_K = 10_000
SPANS = ("neighbours", "parent")
CONTEXT_KEYS = ("weight", "span", "neighbours", "focus_weight", "focus_size")
COARSE_DEFAULT_RANK = 5
DEFAULT_CANDIDATES = 50
DEFAULT_RRF_K = 60
DEFAULT_WEIGHT = 0.5
# `hybrid_auto`: the dense weight at equal dense/BM25 agreement, and its share kept when the index's
# text is in languages the dense model was not trained on (measured: all-MiniLM-L6-v2 on Spanish is
# 30 hit@5 points below BM25, benchmarks/results/defaults.md).
AUTO_WEIGHT = 0.25
FOREIGN_LANGUAGE_STRENGTH = 0.4


class ContextConfigError(ValueError):
    """A `context_scoring` setting is invalid; the message names the field."""


@dataclass(frozen=True)
class ContextScoring:
    """How much a chunk's context counts (`weight`, 0 = off) and what the context is.

    `focus_weight` adds the finer scale: the chunk's best window of `focus_size` BM25 terms
    (query words close together, as in the passage a question was written from).
    """

    weight: float = 0.0
    span: str = "neighbours"
    neighbours: int = 1
    focus_weight: float = 0.0
    focus_size: int = 24

    @property
    def enabled(self) -> bool:
        return self.weight > 0.0 or self.focus_weight > 0.0

    @classmethod
    def from_config(cls, raw: Any, where: str = "context_scoring") -> ContextScoring:
        """Validate a `context_scoring` mapping (`{weight: 0.4, span: neighbours, neighbours: 2}`)."""
        if raw in (None, {}):
            return cls()
        if not isinstance(raw, dict):
            raise ContextConfigError(f"{where}: expected a mapping like {{weight: 0.4, neighbours: 1}}")
        unknown = sorted(set(raw) - set(CONTEXT_KEYS))
        if unknown:
            raise ContextConfigError(f"{where}: unknown field(s) {unknown}; allowed {list(CONTEXT_KEYS)}")
        return cls.checked(**{**cls().as_dict(), **raw}, where=where)

    @classmethod
    def checked(
        cls,
        weight: Any,
        span: Any,
        neighbours: Any,
        focus_weight: Any = 0.0,
        focus_size: Any = 24,
        where: str = "context_scoring",
    ) -> ContextScoring:
        for name, value in (("weight", weight), ("focus_weight", focus_weight)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ContextConfigError(f"{where}.{name}: must be a number between 0 and 1, got {value!r}")
        if weight + focus_weight > 1.0 + 1e-9:
            raise ContextConfigError(
                f"{where}: weight + focus_weight must be at most 1 (the chunk's own score keeps the rest), "
                f"got {weight} + {focus_weight}"
            )
        if not _is_int_in(focus_size, 1, MAX_FOCUS_SIZE):
            raise ContextConfigError(
                f"{where}.focus_size: must be an integer between 1 and {MAX_FOCUS_SIZE}, got {focus_size!r}"
            )
        if span not in SPANS:
            raise ContextConfigError(f"{where}.span: unknown {span!r}; expected one of {list(SPANS)}")
        if not _is_int_in(neighbours, 1, MAX_NEIGHBOURS):
            raise ContextConfigError(
                f"{where}.neighbours: must be an integer between 1 and {MAX_NEIGHBOURS}, got {neighbours!r}"
            )
        return cls(float(weight), span, neighbours, float(focus_weight), focus_size)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _is_int_in(value: Any, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


@dataclass(frozen=True)
class CoarseFallback:
    """`coarse: {config, min_gap, rank}`: ambiguous queries go to the sibling index `config`."""

    config: str
    min_gap: float
    rank: int = COARSE_DEFAULT_RANK


@dataclass(frozen=True)
class IndexDefaults:
    """An index config's search settings, parsed once per index version."""

    candidates: int = DEFAULT_CANDIDATES
    rrf_k: float = DEFAULT_RRF_K
    weight: float = DEFAULT_WEIGHT
    auto_weight: float = AUTO_WEIGHT
    trust_dense: bool = False  # hybrid_auto: `fusion.trusted_weight` (hybrid.trust_dense)
    context: ContextScoring = field(default_factory=ContextScoring)
    collapse: bool = False
    coarse: CoarseFallback | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], index_name: str) -> IndexDefaults:
        """From a stored index config (`IndexConfig.as_dict()`, validated when it was loaded)."""
        hybrid = config.get("hybrid") or {}
        try:
            context = ContextScoring.from_config(config.get("context_scoring"))
        except ContextConfigError as exc:
            raise ContextConfigError(f"index {index_name!r}: {exc}") from exc
        coarse = config.get("coarse") or {}
        return cls(
            candidates=int(hybrid.get("candidates", DEFAULT_CANDIDATES)),
            rrf_k=float(hybrid.get("rrf_k", DEFAULT_RRF_K)),
            weight=float(hybrid.get("weight", DEFAULT_WEIGHT)),
            auto_weight=auto_weight(config),
            trust_dense=hybrid.get("trust_dense") is True,
            context=context,
            collapse=bool(config.get("collapse_duplicates", False)),
            coarse=CoarseFallback(
                config=coarse["config"],
                min_gap=float(coarse.get("min_gap", 0.0)),
                rank=int(coarse.get("rank", COARSE_DEFAULT_RANK)),
            )
            if coarse
            else None,
        )


def auto_weight(config: Mapping[str, Any]) -> float:
    """`hybrid_auto`'s base dense weight for an index: AUTO_WEIGHT, less on text its model was not trained on.

    The index's detected languages (`bm25.languages`, published by `analyzer: auto`) are weighed
    by share: text in a language outside MODEL_LANGUAGES[model] keeps FOREIGN_LANGUAGE_STRENGTH of
    the weight. Undetected text (no `languages`, or language "") counts as covered.
    """
    covers = MODEL_LANGUAGES.get(str(config.get("embedding_model") or ""))
    languages = (config.get("bm25") or {}).get("languages") or {}
    if covers is None or not isinstance(languages, Mapping) or not languages:
        return AUTO_WEIGHT
    total = sum(float(share) for share in languages.values()) or 1.0
    foreign = sum(float(share) for lang, share in languages.items() if lang and lang not in covers) / total
    return AUTO_WEIGHT * (1.0 - foreign * (1.0 - FOREIGN_LANGUAGE_STRENGTH))
