"""One query as every stage reads it: its text, its vector, the options that run and the stages' sizes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from chunkyard.retrieval.embedders.rerankers import Reranker
from chunkyard.retrieval.observability.telemetry import span
from chunkyard.retrieval.settings.options import MAX_K, ResolvedSearch


@dataclass(frozen=True)
class Shape:
    """What a plan's stages keep: the reranker, its pool, the first stage's candidates, the embedding."""

    reranker: Reranker | None
    pool: int
    first_stage: int
    needs_vectors: bool

    @classmethod
    def of(cls, plan: ResolvedSearch, reranker: Reranker | None, rerank_candidates: int) -> Shape:
        """How many candidates each stage keeps for `plan` (with `reranker`: `rerank_candidates`)."""
        k = plan.k
        pool = max(k, rerank_candidates if reranker is not None else k)
        if plan.mmr is not None:
            pool = max(pool, min(plan.candidates, MAX_K), 2 * k)
        # Context scoring, collapsing and the ambiguity gap always see the same candidates: the top k
        # does not depend on k.
        single_list = (
            plan.mode in ("dense", "bm25")
            and not plan.context.enabled
            and not plan.collapse
            and not plan.coarse
        )
        first_stage = pool if single_list else max(pool, plan.candidates)
        needs_vectors = plan.mode != "bm25" or plan.mmr is not None
        return cls(reranker, pool, first_stage, needs_vectors)

    def kept(self, plan: ResolvedSearch) -> int:
        """How many ranked candidates go on to the rows (all the first stage's when MMR or a reranker
        reorders them, else the top k)."""
        return self.first_stage if (self.reranker is not None or plan.mmr is not None) else plan.k


@dataclass(frozen=True)
class Query:
    """One query through the stages: the text, its vector (None when no stage needs it), the options
    that run (`plan`) and what each stage keeps (`shape`)."""

    text: str
    vector: np.ndarray | None
    plan: ResolvedSearch
    shape: Shape


def rounded(timings: dict[str, float]) -> dict[str, float]:
    return {key: round(value, 3) for key, value in timings.items()}


@contextlib.contextmanager
def timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """Time a stage into `timings[key]` (ms), in a span `search.<stage>` (when traces are on)."""
    with span(f"search.{key.removesuffix('_ms')}"):
        started = time.perf_counter()
        yield
        timings[key] = (time.perf_counter() - started) * 1000
