"""Search one published index: dense (HNSW), BM25, hybrid (RRF or weighted), context, MMR, rerank, parents.

Every query reads inside one REPEATABLE READ snapshot, so dense and BM25 candidates come from the
same index version even while a publish commits. Dense queries go to the index's own partition and
order by the expression its HNSW index is built on, so the planner uses that graph.

`retrieval.search(...)` (this module, called like a function) uses a lazily created default Searcher.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from retrieval import bm25 as bm25_lib
from retrieval.config import COARSE_DEFAULT_RANK
from retrieval.context import (
    ChunkLayout,
    ContextConfigError,
    ContextScoring,
    collapse_identical_texts,
    fuse_with_context,
    min_max,
    score_contexts,
)
from retrieval.store import Store, as_array, partition_names, split_index_name

MODES = ("dense", "bm25", "hybrid", "hybrid_weighted")
MAX_K = 1000
HNSW_MAX_EF = 1000  # pgvector's upper bound for hnsw.ef_search


class SearchError(ValueError):
    """Bad search input (unknown mode, k out of range, bad filters): the message names the field."""


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class _IndexHandle:
    name: str
    version: int
    dim: int
    config: dict[str, Any]
    chunks: str
    postings: str
    bm25_params: bm25_lib.Bm25Params
    analyzer: bm25_lib.Analyzer
    context: ContextScoring = field(default_factory=ContextScoring)


def _validate(query: str, k: int, mode: str, filters: Any) -> None:
    if not isinstance(query, str) or not query.strip():
        raise SearchError("query: must be a non-empty string")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise SearchError(f"k: must be an integer between 1 and {MAX_K}, got {k!r}")
    if mode not in MODES:
        raise SearchError(f"mode: unknown {mode!r}; expected one of {MODES}")
    if filters is not None and not isinstance(filters, dict):
        raise SearchError("filters: must be a JSON object matched against chunk metadata (containment)")


class Searcher:
    """Queries published indexes. `embedder_for` is an Embedder or `index_name -> Embedder`.

    Options: `ef_search` (HNSW candidate list, raised to the number of candidates when needed;
    default from CHUNKYARD_EF_SEARCH, else 100: enough at 100k chunks, while a million-chunk
    index needs 400-800 for recall@10 >= 0.95, see docs/deployment.md),
    `bm25_backend` ("sql": score from the postings in Postgres; "memory": a scipy copy per index,
    reloaded when the index version changes; both return rank-bm25's scores; default from
    CHUNKYARD_BM25_BACKEND, else "memory": at 300k chunks it answers in 2-6 ms where the SQL
    aggregation over postings takes 150-500 ms; filtered BM25 queries always use SQL).
    """

    def __init__(
        self,
        store: Store | None = None,
        embedder_for: Callable[[str], Any] | Any | None = None,
        *,
        ef_search: int | None = None,
        bm25_backend: str | None = None,
        rerank_candidates: int = 20,
    ) -> None:
        bm25_backend = bm25_backend or os.environ.get("CHUNKYARD_BM25_BACKEND", "memory")
        if bm25_backend not in ("sql", "memory"):
            raise SearchError(f"bm25_backend: unknown {bm25_backend!r}; expected 'sql' or 'memory'")
        self.store = store or Store()
        self._embedder_for = embedder_for
        ef_search = ef_search if ef_search is not None else os.environ.get("CHUNKYARD_EF_SEARCH", "100")
        try:
            self.ef_search = int(ef_search)
        except ValueError:
            raise SearchError(f"ef_search: expected an integer, got {ef_search!r}") from None
        if not 1 <= self.ef_search <= HNSW_MAX_EF:
            raise SearchError(f"ef_search must be between 1 and {HNSW_MAX_EF}, got {self.ef_search}")
        self.bm25_backend = bm25_backend
        self.rerank_candidates = int(rerank_candidates)
        self._handles: dict[str, _IndexHandle] = {}
        self._memory: dict[str, bm25_lib.MemoryBm25] = {}
        self._reloading: set[str] = set()
        self._rerankers: dict[str, Any] = {}
        self._layouts: dict[str, ChunkLayout] = {}
        self._lock = threading.Lock()

    # -- resolution --------------------------------------------------------------------------

    def embedder(self, index_name: str, config: dict[str, Any] | None = None) -> Any:
        if self._embedder_for is None:
            from retrieval.embedder import embedder_for_config

            return embedder_for_config(config or {})
        if callable(self._embedder_for) and not hasattr(self._embedder_for, "embed"):
            return self._embedder_for(index_name)
        return self._embedder_for

    def _handle(self, conn: Any, index: str, *, begin: bool = False) -> _IndexHandle:
        """The index's published state; with `begin`, the snapshot's BEGIN rides in the same round trip."""
        name = split_index_name(index)
        with conn.pipeline():
            if begin:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cursor = conn.execute("SELECT version, dim, config FROM indexes WHERE name = %s", (name,))
        row = cursor.fetchone()
        if row is None:
            raise IndexNotFoundError(f"index {name!r} does not exist; known: {self._known(conn)}")
        version, dim, config = int(row[0]), row[1], row[2]
        if version == 0 or not dim:
            raise IndexNotFoundError(f"index {name!r} has not been published yet")
        cached = self._handles.get(name)
        if cached is not None and cached.version == version and cached.config == config:
            return cached
        parts = partition_names(name)
        bm25_config = config.get("bm25") or {}
        try:
            context = ContextScoring.from_config(config.get("context_scoring"))
        except ContextConfigError as exc:
            raise SearchError(f"index {name!r}: {exc}") from exc
        handle = _IndexHandle(
            name=name,
            version=version,
            dim=int(dim),
            config=config,
            chunks=parts["chunks"],
            postings=parts["postings"],
            bm25_params=bm25_lib.Bm25Params.from_config(bm25_config),
            analyzer=bm25_lib.build_analyzer(bm25_config),
            context=context,
        )
        self._handles[name] = handle
        return handle

    @staticmethod
    def _known(conn: Any) -> list[str]:
        return [r[0] for r in conn.execute("SELECT name FROM indexes WHERE version > 0 ORDER BY name")]

    def index_config(self, index: str) -> dict[str, Any]:
        with self.store.connection() as conn:
            return self._handle(conn, index).config

    # -- public API --------------------------------------------------------------------------

    def search(
        self,
        query: str,
        index: str = "recursive-256",
        k: int = 5,
        mode: str = "hybrid",
        *,
        rerank: Any = None,
        filters: dict[str, Any] | None = None,
        include_parent: bool = False,
        mmr: float | None = None,
        candidates: int | None = None,
        rrf_k: int | None = None,
        weight: float | None = None,
        ef_search: int | None = None,
        context_weight: float | None = None,
        context_neighbours: int | None = None,
        focus_weight: float | None = None,
        focus_size: int | None = None,
        collapse_duplicates: bool | None = None,
        coarse_min_gap: float | None = None,
    ) -> list[SearchResult]:
        """Top-k chunks of `index` for `query`. See the module docstring for the modes."""
        return self.search_batch(
            [query],
            index,
            k,
            mode,
            rerank=rerank,
            filters=filters,
            include_parent=include_parent,
            mmr=mmr,
            candidates=candidates,
            rrf_k=rrf_k,
            weight=weight,
            ef_search=ef_search,
            context_weight=context_weight,
            context_neighbours=context_neighbours,
            focus_weight=focus_weight,
            focus_size=focus_size,
            collapse_duplicates=collapse_duplicates,
            coarse_min_gap=coarse_min_gap,
        )[0]

    def search_batch(
        self,
        queries: Sequence[str],
        index: str = "recursive-256",
        k: int = 5,
        mode: str = "hybrid",
        *,
        rerank: Any = None,
        filters: dict[str, Any] | None = None,
        include_parent: bool = False,
        mmr: float | None = None,
        candidates: int | None = None,
        rrf_k: int | None = None,
        weight: float | None = None,
        ef_search: int | None = None,
        context_weight: float | None = None,
        context_neighbours: int | None = None,
        focus_weight: float | None = None,
        focus_size: int | None = None,
        collapse_duplicates: bool | None = None,
        coarse_min_gap: float | None = None,
        query_vectors: np.ndarray | None = None,
    ) -> list[list[SearchResult]]:
        """Like `search` for many queries; all query vectors are computed in one embedding call.

        `context_weight` / `context_neighbours` / `focus_weight` / `focus_size` override the index's
        `context_scoring` (see `retrieval.context`): candidates are re-ranked with the score of the
        text around them and of their best window. `collapse_duplicates` overrides the index's
        option of the same name: identical chunk texts take one result slot.

        Adaptive granularity: an index whose config has `coarse: {config, min_gap}` answers a query
        from the same collection's coarse index (larger chunks) when its own ranking is ambiguous:
        the gap between the first and the `rank`-th (default 5, whatever k is) result's ranking
        score (`with_context`, or the fused score min-max normalised over the candidates) is below
        `min_gap` (`coarse_min_gap` overrides it; 0 never falls back). Every result carries that gap
        as `scores["fine_gap"]` and the index that answered as `index`; a coarse answer's timings
        add the fine ranking's time (`fine_ms`) to its `total_ms`.

        `query_vectors` (one row per query, from the index's own model) skips the query embedding.
        """
        if isinstance(queries, str):
            raise SearchError("queries: expected a list of strings, not a single string")
        for query in queries:
            _validate(query, k, mode, filters)
        if mmr is not None and not (isinstance(mmr, int | float) and 0.0 <= float(mmr) <= 1.0):
            raise SearchError(f"mmr: lambda must be between 0 and 1, got {mmr!r}")
        if not queries:
            return []
        with self.store.connection() as conn:
            handle = self._handle(conn, index)
        hybrid_cfg = handle.config.get("hybrid") or {}
        n_candidates = int(candidates or hybrid_cfg.get("candidates", 50))
        if not 1 <= n_candidates <= MAX_K:
            raise SearchError(f"candidates: must be between 1 and {MAX_K}, got {n_candidates}")
        rrf_k_value = float(rrf_k if rrf_k is not None else hybrid_cfg.get("rrf_k", 60))
        weight_value = float(weight if weight is not None else hybrid_cfg.get("weight", 0.5))
        if not 0.0 <= weight_value <= 1.0:
            raise SearchError(f"weight: dense weight must be between 0 and 1, got {weight_value}")
        context = self._context_settings(
            handle.context,
            {
                "weight": context_weight,
                "neighbours": context_neighbours,
                "focus_weight": focus_weight,
                "focus_size": focus_size,
            },
        )
        reranker = self._reranker(rerank)
        pool = max(k, self.rerank_candidates if reranker is not None else k)
        if mmr is not None:
            pool = max(pool, min(n_candidates, MAX_K), 2 * k)
        collapse = bool(
            handle.config.get("collapse_duplicates", False)
            if collapse_duplicates is None
            else collapse_duplicates
        )
        coarse = handle.config.get("coarse") or {}
        min_gap = float(coarse.get("min_gap", 0.0) if coarse_min_gap is None else coarse_min_gap)
        if not 0.0 <= min_gap <= 1.0:
            raise SearchError(f"coarse_min_gap: must be between 0 and 1, got {coarse_min_gap!r}")
        if coarse_min_gap is not None and not coarse:
            raise SearchError(f"coarse_min_gap: index {handle.name!r} has no `coarse` index config")
        # Context re-ranking, collapsing and the ambiguity gap always see the same candidates: the top
        # k does not depend on k.
        single_list = mode in ("dense", "bm25") and not context.enabled and not collapse and not coarse
        first_stage = pool if single_list else max(pool, n_candidates)

        needs_vectors = mode != "bm25" or mmr is not None
        embed_ms = 0.0
        if query_vectors is not None:
            query_vectors = np.asarray(query_vectors, dtype=np.float32)
            if query_vectors.shape != (len(queries), handle.dim):
                raise SearchError(
                    f"query_vectors: expected shape ({len(queries)}, {handle.dim}) for index "
                    f"{handle.name!r}, got {query_vectors.shape}"
                )
        elif needs_vectors:
            started = time.perf_counter()
            query_vectors = np.asarray(self.embedder(handle.name, handle.config).embed(list(queries)))
            embed_ms = (time.perf_counter() - started) * 1000 / len(queries)
            if query_vectors.shape[1] != handle.dim:
                raise SearchError(
                    f"index {handle.name!r} holds {handle.dim}-dim vectors but the query embedder gives "
                    f"{query_vectors.shape[1]}"
                )

        results: list[list[SearchResult]] = []
        gaps: list[float] = []
        totals_ms: list[float] = []
        for qi, query in enumerate(queries):
            total_started = time.perf_counter()
            timings = {"embed_ms": embed_ms} if needs_vectors else {}
            qvec = query_vectors[qi] if query_vectors is not None else None
            with self.store.connection() as conn, _read_snapshot(conn):
                handle = self._handle(conn, index, begin=True)
                dense: list[tuple[str, float]] = []
                lexical: list[tuple[str, float]] = []
                if mode != "bm25":
                    started = time.perf_counter()
                    n = first_stage if mode == "dense" else max(first_stage, n_candidates)
                    dense = self._dense(conn, handle, qvec, n, filters, ef_search)
                    timings["dense_ms"] = (time.perf_counter() - started) * 1000
                if mode != "dense":
                    started = time.perf_counter()
                    n = first_stage if mode == "bm25" else max(first_stage, n_candidates)
                    lexical = self._bm25(conn, handle, query, n, filters)
                    timings["bm25_ms"] = (time.perf_counter() - started) * 1000
                started = time.perf_counter()
                fused = _fuse(mode, dense, lexical, rrf_k_value, weight_value)
                timings["fuse_ms"] = (time.perf_counter() - started) * 1000
                if context.enabled and fused:
                    started = time.perf_counter()
                    fused = self._with_context(
                        conn, handle, mode, fused, context, query, qvec, weight_value, rrf_k_value
                    )
                    timings["context_ms"] = (time.perf_counter() - started) * 1000
                if collapse and fused:
                    started = time.perf_counter()
                    fused = collapse_identical_texts(fused, self._layout(conn, handle))
                    timings["collapse_ms"] = (time.perf_counter() - started) * 1000
                gaps.append(
                    _ranking_gap(mode, fused, int(coarse.get("rank", COARSE_DEFAULT_RANK)), context.enabled)
                )
                started = time.perf_counter()
                ranked = fused[: first_stage if (reranker is not None or mmr is not None) else k]
                rows = self._rows(
                    conn, handle, [cid for cid, _ in ranked], with_vectors=mmr is not None, commit=True
                )
                timings["fetch_ms"] = (time.perf_counter() - started) * 1000
            hits = [(cid, scores) for cid, scores in ranked if cid in rows]
            if mmr is not None and qvec is not None:
                started = time.perf_counter()
                hits = _mmr(hits, rows, qvec, float(mmr), max(k, pool if reranker else k))
                timings["mmr_ms"] = (time.perf_counter() - started) * 1000
            if reranker is not None:
                started = time.perf_counter()
                hits = hits[:pool]
                rerank_scores = reranker.score(query, [rows[cid]["text"] for cid, _ in hits])
                for (_, scores), value in zip(hits, rerank_scores, strict=True):
                    scores["rerank"] = float(value)
                hits = sorted(hits, key=lambda h: -h[1]["rerank"])
                timings["rerank_ms"] = (time.perf_counter() - started) * 1000
            hits = hits[:k]
            out = []
            for rank, (cid, scores) in enumerate(hits, start=1):
                row = rows[cid]
                out.append(
                    SearchResult(
                        chunk_id=cid,
                        doc_id=row["doc_id"],
                        start=row["start"],
                        end=row["end"],
                        text=row["text"],
                        metadata=row["metadata"],
                        scores=scores,
                        rank=rank,
                        index=handle.name,
                        index_version=handle.version,
                    )
                )
            if include_parent and out:
                started = time.perf_counter()
                self._attach_parents(handle, out, rows)
                timings["parent_ms"] = (time.perf_counter() - started) * 1000
            timings["total_ms"] = (time.perf_counter() - total_started) * 1000 + timings.get("embed_ms", 0.0)
            totals_ms.append(timings["total_ms"])
            for result in out:
                result.timings = {key: round(value, 3) for key, value in timings.items()}
                if coarse:
                    result.scores["fine_gap"] = gaps[qi]
            results.append(out)
        if coarse and min_gap > 0.0:
            ambiguous = [qi for qi, gap in enumerate(gaps) if gap < min_gap]
            if ambiguous:
                results = self._coarse_answers(
                    handle,
                    query_vectors,
                    coarse["config"],
                    queries,
                    ambiguous,
                    gaps,
                    totals_ms,
                    results,
                    k,
                    mode,
                    rerank=rerank,
                    filters=filters,
                    include_parent=include_parent,
                    mmr=mmr,
                    ef_search=ef_search,
                )
        return results

    def _coarse_answers(
        self,
        fine: _IndexHandle,
        fine_vectors: np.ndarray | None,
        coarse_config: str,
        queries: Sequence[str],
        ambiguous: list[int],
        gaps: list[float],
        totals_ms: list[float],
        results: list[list[SearchResult]],
        k: int,
        mode: str,
        **options: Any,
    ) -> list[list[SearchResult]]:
        """Replace the ambiguous queries' results by the coarse index's (its own ranking settings)."""
        coarse_index = f"{fine.name.split('/', 1)[0]}/{coarse_config}"
        try:
            with self.store.connection() as conn:
                coarse = self._handle(conn, coarse_index)
        except IndexNotFoundError as exc:
            raise IndexNotFoundError(
                f"index {fine.name!r} falls back to {coarse_index!r} for ambiguous queries, but: {exc}"
            ) from exc
        same_model = all(
            coarse.config.get(key) == fine.config.get(key) for key in ("embedding_model", "embedder")
        )
        vectors = fine_vectors[ambiguous] if same_model and fine_vectors is not None else None
        coarse_results = self.search_batch(
            [queries[qi] for qi in ambiguous], coarse_index, k, mode, query_vectors=vectors, **options
        )
        merged = list(results)
        for qi, answer in zip(ambiguous, coarse_results, strict=True):
            for result in answer:
                result.scores["fine_gap"] = gaps[qi]
                fine_ms = round(totals_ms[qi], 3)
                result.timings = {
                    **result.timings,
                    "fine_ms": fine_ms,
                    "total_ms": round(result.timings.get("total_ms", 0.0) + fine_ms, 3),
                }
            merged[qi] = answer
        return merged

    # -- stages ------------------------------------------------------------------------------

    @staticmethod
    def _context_settings(configured: ContextScoring, overrides: dict[str, Any]) -> ContextScoring:
        """The index's context scoring with the per-request overrides that are not None, validated."""
        given = {name: value for name, value in overrides.items() if value is not None}
        if not given:
            return configured
        merged = {**configured.as_dict(), **given}
        try:
            return ContextScoring.checked(
                merged["weight"],
                merged["span"],
                merged["neighbours"],
                merged["focus_weight"],
                merged["focus_size"],
                where="context",
            )
        except ContextConfigError as exc:
            message = str(exc)
            for name in ("weight", "neighbours"):  # name the request parameter
                message = message.replace(f"context.{name}:", f"context_{name}:")
            raise SearchError(message.replace("context.focus_", "focus_")) from exc

    def _layout(self, conn: Any, handle: _IndexHandle) -> ChunkLayout:
        """The index's chunks in document order at exactly `handle.version` (loaded in the snapshot)."""
        layout = self._layouts.get(handle.name)
        if layout is None or layout.version != handle.version:
            layout = ChunkLayout.load(conn, handle.chunks, handle.version)
            with self._lock:
                self._layouts[handle.name] = layout
        return layout

    def _with_context(
        self,
        conn: Any,
        handle: _IndexHandle,
        mode: str,
        fused: list[tuple[str, dict[str, float]]],
        context: ContextScoring,
        query: str,
        qvec: np.ndarray | None,
        dense_weight: float,
        rrf_k: float,
    ) -> list[tuple[str, dict[str, float]]]:
        evidence = score_contexts(
            conn,
            index_name=handle.name,
            chunks_partition=handle.chunks,
            postings_partition=handle.postings,
            dim=handle.dim,
            layout=self._layout(conn, handle),
            settings=context,
            candidates=[cid for cid, _ in fused],
            terms=handle.analyzer.analyze(query) if mode != "dense" else None,
            bm25_params=handle.bm25_params,
            query_vector=qvec if mode != "bm25" else None,
            analyzer=handle.analyzer,
        )
        return fuse_with_context(mode, fused, evidence, context, dense_weight=dense_weight, rrf_k=rrf_k)

    def _dense(
        self,
        conn: Any,
        handle: _IndexHandle,
        qvec: np.ndarray,
        n: int,
        filters: dict[str, Any] | None,
        ef_search: int | None,
    ) -> list[tuple[str, float]]:
        """Nearest chunks by cosine via the partition's HNSW index; exact scan if a filter starves it."""
        ef = min(HNSW_MAX_EF, max(int(ef_search or self.ef_search), n))
        vector_type = sql.SQL("vector({})").format(sql.Literal(handle.dim))
        where = sql.SQL(" WHERE metadata @> %(filters)s") if filters else sql.SQL("")
        params: dict[str, Any] = {"q": np.asarray(qvec, dtype=np.float32), "n": n}
        if filters:
            params["filters"] = Jsonb(filters)
        query = sql.SQL(
            "SELECT chunk_id, (embedding::{t}) <=> %(q)s::{t} AS distance FROM {part}{where}"
            " ORDER BY (embedding::{t}) <=> %(q)s::{t} LIMIT %(n)s"
        ).format(t=vector_type, part=sql.Identifier(handle.chunks), where=where)
        with conn.pipeline():  # one round trip for the setting and the query
            conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)))
            cursor = conn.execute(query, params)
        rows = cursor.fetchall()
        if len(rows) < n:
            # HNSW's candidate list can run dry (a selective filter, or n > ef): count what exists and
            # fall back to an exact scan so k rows come back whenever k rows match.
            available = conn.execute(
                sql.SQL("SELECT count(*) FROM {part}{where}").format(
                    part=sql.Identifier(handle.chunks), where=where
                ),
                params,
            ).fetchone()[0]
            if available > len(rows):
                exact = sql.SQL(
                    "SELECT chunk_id, embedding <=> %(q)s::{t} AS distance FROM {part}{where}"
                    " ORDER BY 2 LIMIT %(n)s"
                ).format(t=vector_type, part=sql.Identifier(handle.chunks), where=where)
                rows = conn.execute(exact, params).fetchall()
        return [(cid, 1.0 - float(distance)) for cid, distance in rows]

    def _bm25(
        self, conn: Any, handle: _IndexHandle, query: str, n: int, filters: dict[str, Any] | None
    ) -> list[tuple[str, float]]:
        terms = handle.analyzer.analyze(query)
        if not terms:
            return []
        if self.bm25_backend == "memory" and not filters:
            memory = self._memory_index(handle)
            if memory is not None:
                return memory.top_k(terms, n)
        return bm25_lib.sql_top_k(
            conn, handle.name, handle.postings, handle.chunks, terms, handle.bm25_params, n, filters=filters
        )

    def _memory_index(self, handle: _IndexHandle) -> bm25_lib.MemoryBm25 | None:
        """The in-memory BM25 copy at exactly `handle.version`, or None (the caller then uses SQL).

        A missing or outdated copy is (re)loaded in a background thread, so a publish never
        stalls queries: until the new copy is ready they are answered from the postings in Postgres.
        """
        memory = self._memory.get(handle.name)
        if memory is not None and memory.version == handle.version:
            return memory
        if memory is None or memory.version < handle.version:
            self._start_reload(handle.name)
        return None

    def _start_reload(self, index_name: str) -> None:
        with self._lock:
            if index_name in self._reloading:
                return
            self._reloading.add(index_name)
        thread = threading.Thread(target=self._reload, args=(index_name,), daemon=True, name="bm25-reload")
        thread.start()

    def _reload(self, index_name: str) -> float:
        started = time.perf_counter()
        try:
            with self.store.connection() as conn:
                handle = self._handle(conn, index_name)
                memory = bm25_lib.MemoryBm25.load(conn, handle.name, handle.bm25_params)
            with self._lock:
                current = self._memory.get(index_name)
                if current is None or current.version < memory.version:
                    self._memory[index_name] = memory
        finally:
            with self._lock:
                self._reloading.discard(index_name)
        return time.perf_counter() - started

    def warm(self, index: str) -> float:
        """Load the in-memory BM25 copy of `index` now (seconds taken); e.g. before serving traffic."""
        return self._reload(split_index_name(index))

    def _rows(
        self,
        conn: Any,
        handle: _IndexHandle,
        chunk_ids: list[str],
        *,
        with_vectors: bool = False,
        commit: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """Chunk rows by id; with `commit`, the snapshot's COMMIT rides in the same round trip."""
        if not chunk_ids:
            if commit:
                conn.execute("COMMIT")
            return {}
        columns = sql.SQL('chunk_id, doc_id, start, "end", text, metadata, parent_id')
        if with_vectors:
            columns = columns + sql.SQL(", embedding")
        with conn.pipeline():
            cursor = conn.execute(
                sql.SQL("SELECT {} FROM {} WHERE index_name = %s AND chunk_id = ANY(%s)").format(
                    columns, sql.Identifier(handle.chunks)
                ),
                (handle.name, chunk_ids),
            )
            if commit:
                conn.execute("COMMIT")
        rows = cursor.fetchall()
        out = {}
        for row in rows:
            out[row[0]] = {
                "doc_id": row[1],
                "start": row[2],
                "end": row[3],
                "text": row[4],
                "metadata": row[5] or {},
                "parent_id": row[6],
                "embedding": as_array(row[7]) if with_vectors else None,
            }
        return out

    def _attach_parents(
        self, handle: _IndexHandle, results: list[SearchResult], rows: dict[str, dict[str, Any]]
    ) -> None:
        """Parent spans of hierarchical chunks: a stored parent chunk, or `parent_start/end` in metadata."""
        parent_ids = {rows[r.chunk_id]["parent_id"] for r in results if rows[r.chunk_id]["parent_id"]}
        collection = handle.name.split("/", 1)[0]
        with self.store.connection() as conn:
            parents = self._rows(conn, handle, sorted(parent_ids)) if parent_ids else {}
            for result in results:
                parent_id = rows[result.chunk_id]["parent_id"]
                if parent_id and parent_id in parents:
                    p = parents[parent_id]
                    result.parent = {
                        "chunk_id": parent_id,
                        "doc_id": p["doc_id"],
                        "start": p["start"],
                        "end": p["end"],
                        "text": p["text"],
                    }
                    continue
                meta = result.metadata
                start, end = meta.get("parent_start"), meta.get("parent_end")
                if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end:
                    row = conn.execute(
                        "SELECT substr(text, %s, %s) FROM documents WHERE collection = %s AND doc_id = %s",
                        (start + 1, end - start, collection, result.doc_id),
                    ).fetchone()
                    if row is not None:
                        result.parent = {
                            "chunk_id": parent_id,
                            "doc_id": result.doc_id,
                            "start": start,
                            "end": end,
                            "text": row[0],
                        }

    def _reranker(self, rerank: Any) -> Any:
        if rerank is None or rerank is False:
            return None
        if hasattr(rerank, "score"):
            return rerank
        if not isinstance(rerank, str) or not rerank.strip():
            raise SearchError("rerank: expected a reranker name ('maxsim', 'cross-encoder:<path>') or object")
        with self._lock:
            if rerank not in self._rerankers:
                from retrieval.rerank import build_reranker

                self._rerankers[rerank] = build_reranker(rerank, embedder=self._default_embedder())
            return self._rerankers[rerank]

    def _default_embedder(self) -> Any:
        if self._embedder_for is not None and hasattr(self._embedder_for, "embed"):
            return self._embedder_for
        return None


@contextlib.contextmanager
def _read_snapshot(conn: Any) -> Iterator[None]:
    """A read-only REPEATABLE READ transaction whose BEGIN/COMMIT the caller pipelines with queries.

    The caller sends `BEGIN ...` (see `_handle(begin=True)`) and `COMMIT` (see `_rows(commit=True)`);
    this only makes sure an error or an early exit never leaves the pooled connection in a transaction.
    """
    try:
        yield
    finally:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")


def _fuse(
    mode: str,
    dense: list[tuple[str, float]],
    lexical: list[tuple[str, float]],
    rrf_k: float,
    weight: float,
) -> list[tuple[str, dict[str, float]]]:
    """Merge ranked lists into one ranking with every stage's score kept per chunk."""
    scores: dict[str, dict[str, float]] = {}
    for rank, (cid, value) in enumerate(dense, start=1):
        scores.setdefault(cid, {})["dense"] = value
        scores[cid]["dense_rank"] = rank
    for rank, (cid, value) in enumerate(lexical, start=1):
        scores.setdefault(cid, {})["bm25"] = value
        scores[cid]["bm25_rank"] = rank
    if mode == "dense":
        key = "dense"
    elif mode == "bm25":
        key = "bm25"
    elif mode == "hybrid":
        key = "rrf"
        for entry in scores.values():
            entry["rrf"] = sum(1.0 / (rrf_k + entry[r]) for r in ("dense_rank", "bm25_rank") if r in entry)
    else:
        key = "weighted"
        dense_norm = min_max(dict(dense))
        bm25_norm = min_max(dict(lexical))
        for cid, entry in scores.items():
            entry["weighted"] = weight * dense_norm.get(cid, 0.0) + (1 - weight) * bm25_norm.get(cid, 0.0)
    order = sorted(scores, key=lambda cid: (-scores[cid][key], cid))
    return [(cid, scores[cid]) for cid in order]


def _ranking_gap(
    mode: str, ranked: list[tuple[str, dict[str, float]]], rank: int, with_context: bool
) -> float:
    """How clearly the first result beats the `rank`-th: their ranking scores' difference, in [0, 1].

    With context scoring the ranking score (`with_context`) is already a mix of min-max normalised
    parts; otherwise the fused score is min-max normalised over the candidates first.
    """
    if len(ranked) < 2:
        return 1.0
    key = (
        "with_context"
        if with_context
        else {"dense": "dense", "bm25": "bm25", "hybrid": "rrf"}.get(mode, "weighted")
    )
    values = [scores.get(key, 0.0) for _, scores in ranked]
    kth = values[min(rank, len(values)) - 1]
    if with_context:
        return float(values[0] - kth)
    spread = max(values) - min(values)
    return float((values[0] - kth) / spread) if spread > 0 else 0.0


def _mmr(
    hits: list[tuple[str, dict[str, float]]],
    rows: dict[str, dict[str, Any]],
    qvec: np.ndarray,
    lam: float,
    k: int,
) -> list[tuple[str, dict[str, float]]]:
    """Maximal marginal relevance: relevance to the query minus similarity to what is already picked."""
    if not hits:
        return hits
    vectors = np.stack([rows[cid]["embedding"] for cid, _ in hits])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
    relevance = vectors @ (qvec / max(np.linalg.norm(qvec), 1e-12))
    chosen: list[int] = []
    redundancy = np.full(len(hits), -np.inf)
    remaining = set(range(len(hits)))
    while remaining and len(chosen) < k:
        best = max(
            remaining,
            key=lambda i: (lam * relevance[i] - (1 - lam) * (redundancy[i] if chosen else 0.0), -i),
        )
        chosen.append(best)
        remaining.discard(best)
        redundancy = np.maximum(redundancy, vectors @ vectors[best])
    out = []
    for i in chosen:
        cid, scores = hits[i]
        scores["mmr"] = float(lam * relevance[i])
        out.append((cid, scores))
    return out


# -- module-level `retrieval.search(...)` --------------------------------------------------------

_default: Searcher | None = None
_default_lock = threading.Lock()


def default_searcher() -> Searcher:
    """A Searcher on `retrieval.db.database_url()`, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Searcher(Store())
        return _default


def search(
    query: str, index: str = "recursive-256", k: int = 5, mode: str = "hybrid", **kwargs: Any
) -> list[SearchResult]:
    """In-process search with the default Searcher (same signature and results as `Client.search`)."""
    return default_searcher().search(query, index, k, mode, **kwargs)


class _CallableModule(types.ModuleType):
    """Lets `retrieval.search(...)` call `search` while `retrieval.search.Searcher` stays importable."""

    def __call__(
        self, query: str, index: str = "recursive-256", k: int = 5, mode: str = "hybrid", **kwargs: Any
    ) -> list[SearchResult]:
        return search(query, index, k, mode, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
