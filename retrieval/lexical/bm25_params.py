"""BM25's parameters (k1, b, epsilon) as an index config gives them, checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chunkyard.retrieval.lexical.analysis import AnalyzerConfigError

DEFAULT_PARAMS = {"k1": 1.5, "b": 0.75, "epsilon": 0.25}


@dataclass(frozen=True)
class Bm25Params:
    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25

    @classmethod
    def from_config(cls, bm25_config: dict[str, Any] | None) -> Bm25Params:
        given = bm25_config or {}
        params = cls(
            k1=float(given.get("k1", DEFAULT_PARAMS["k1"])),
            b=float(given.get("b", DEFAULT_PARAMS["b"])),
            epsilon=float(given.get("epsilon", DEFAULT_PARAMS["epsilon"])),
        )
        if params.k1 < 0 or not 0 <= params.b <= 1:
            raise AnalyzerConfigError(f"bm25: need k1 >= 0 and 0 <= b <= 1, got k1={params.k1}, b={params.b}")
        return params
