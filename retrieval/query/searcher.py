"""The Searcher: one published index queried through its stages, each in its own module.

    query vectors (dense) -> dense / lexical candidates -> fusion -> context scoring -> collapse
    -> coarse fallback (optionally beside all of this, see SPECULATE_MAX_QUERIES) -> rows -> MMR
    -> rerank -> parents

One search is one `SearchRequest` (query, `IndexRef`, `SearchOptions`). Its options are merged
once with an alias's pinned ones (`SearchOptions.over`) and resolved once with the index's defaults
(`ResolvedSearch`); each stage then reads one `Query` value (`plan`). Every query reads inside one
read transaction (see `handles`), so all its candidates come from the same index version.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psycopg
from chunkyard.retrieval.lexical.languages import crosses_languages
from chunkyard.retrieval.query import coarse as coarse_stage
from chunkyard.retrieval.query.aliases import resolve as resolve_alias
from chunkyard.retrieval.query.budget import fit_to_budget, llm_tokenizer
from chunkyard.retrieval.query.collapse import collapse_identical_texts
from chunkyard.retrieval.query.context import Layouts, rank_with_context
from chunkyard.retrieval.query.dense import QueryEmbedder, checked_vectors, dense_candidates, embed_queries
from chunkyard.retrieval.query.fusion import Candidates, Ranked, fuse
from chunkyard.retrieval.query.handles import IndexHandle, IndexHandles, read_transaction
from chunkyard.retrieval.query.highlights import add_highlights
from chunkyard.retrieval.query.lexical import LexicalCandidates
from chunkyard.retrieval.query.mmr import mmr
from chunkyard.retrieval.query.plan import Query, Shape, rounded, timed
from chunkyard.retrieval.query.reranking import Rerankers, rerank
from chunkyard.retrieval.query.results import IndexNotFoundError, SearchResult
from chunkyard.retrieval.query.rows import attach_parents, fetch_rows, to_results
from chunkyard.retrieval.query.sections import section_pool, widen_to_sections
from chunkyard.retrieval.settings.config import default_collection
from chunkyard.retrieval.settings.default_index import named
from chunkyard.retrieval.settings.index_defaults import COARSE_DEFAULT_RANK
from chunkyard.retrieval.settings.names import IndexName, IndexRef
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import HNSW_MAX_EF, ResolvedSearch, SearchOptions, SearchRequest
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.published_chunks import read_snapshot
from chunkyard.retrieval.store.server import VectorFeatures

CONTEXT_BACKENDS = ("sql", "memory")
# Up to this many queries per call, the coarse index is searched beside the fine ranking (see
# `coarse.speculate`); otherwise an ambiguous query's coarse ranking follows its fine one in the same
# read transaction. Off (0): on 2 cores every query then pays for the coarse ranking too, p50 90 -> 136 ms,
# p95 158 -> 193 ms (benchmarks/results/adaptive.md); with the in-transaction fallback and given query
# vectors on chroma_general, beside is p50/p95 12.6/17.2 ms against 8.7/13.3 ms after (load 1.4).
SPECULATE_MAX_QUERIES = 0
EmbedderSource = QueryEmbedder | Callable[[str], QueryEmbedder]


class Searcher:
    """Queries published indexes. `embedder_for` is an Embedder or `index_name -> Embedder`.

    `ef_search`: the HNSW candidate list, raised to the number of candidates when needed (default
    from CHUNKYARD_EF_SEARCH, else 100: enough at 100k chunks, while a million-chunk index needs
    400-800 for recall@10 >= 0.95, see docs/deployment.md). `bm25_backend`: "sql" or "memory"
    (default from CHUNKYARD_BM25_BACKEND, else "memory"; see `lexical`). `context_backend`: where
    context scoring reads the neighbours' term frequencies, vectors and analysed terms: "memory" (the
    index version's `ContextStatistics`, loaded once) or "sql" (per query; default from
    CHUNKYARD_CONTEXT_BACKEND, else "memory"). `rerank_candidates`: how many first-stage hits a
    reranker sees.
    """

    def __init__(
        self,
        store: Store | None = None,
        embedder_for: EmbedderSource | None = None,
        *,
        ef_search: int | str | None = None,
        bm25_backend: str | None = None,
        context_backend: str | None = None,
        rerank_candidates: int = 20,
    ) -> None:
        self.store = store or Store()
        self._embedder_for = embedder_for
        ef_search = ef_search if ef_search is not None else os.environ.get("CHUNKYARD_EF_SEARCH", "100")
        try:
            self.ef_search = int(ef_search)
        except ValueError:
            raise SearchError(f"ef_search: expected an integer, got {ef_search!r}") from None
        if not 1 <= self.ef_search <= HNSW_MAX_EF:
            raise SearchError(f"ef_search must be between 1 and {HNSW_MAX_EF}, got {self.ef_search}")
        self.rerank_candidates = int(rerank_candidates)
        self._handles = IndexHandles()
        backend = bm25_backend or os.environ.get("CHUNKYARD_BM25_BACKEND", "memory")
        self.lexical = LexicalCandidates(self.store, self._handles, backend)
        self._layouts = Layouts()
        self.context_backend = context_backend or os.environ.get("CHUNKYARD_CONTEXT_BACKEND", "memory")
        if self.context_backend not in CONTEXT_BACKENDS:
            raise SearchError(
                f"context_backend: unknown {self.context_backend!r}; expected 'sql' or 'memory'"
            )
        shared = embedder_for if isinstance(embedder_for, QueryEmbedder) else None
        self._rerankers = Rerankers(shared)

    @property
    def bm25_backend(self) -> str:
        return self.lexical.backend

    def embedder(self, index_name: str, config: dict[str, Any] | None = None) -> QueryEmbedder:
        """The embedder for `index_name`'s queries (the index config's model when none was given; an
        embedding server's with its query timeout)."""
        if self._embedder_for is None:
            from chunkyard.retrieval.embedders.embedder import embedder_for_config

            return embedder_for_config(config or {}, queries=True)
        if isinstance(self._embedder_for, QueryEmbedder):
            return self._embedder_for
        return self._embedder_for(index_name)

    def warm(self, index: str) -> float:
        """Load the in-memory BM25 copy of `index` now (seconds taken); e.g. before serving traffic.

        An index whose config turns context scoring on also gets its context statistics loaded.
        """
        started = time.perf_counter()
        self.lexical.warm(index)
        handle = self._handle(index)
        if handle.defaults.context.enabled and self.context_backend == "memory":
            with self.store.connection() as conn, conn.transaction():
                read_snapshot(conn)
                handle = self._handles.get(conn, index)
                self._layouts.warm(conn, handle, handle.defaults.context)
        return time.perf_counter() - started

    def _handle(self, index: str) -> IndexHandle:
        with self.store.connection() as conn:
            return self._handles.get(conn, index)

    # -- public API ------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        index: IndexRef | str | None = None,
        options: SearchOptions | None = None,
        **overrides: Any,
    ) -> list[SearchResult]:
        """Top-k chunks of `index` (None: the project's default index) for `query`: `options` (a
        SearchOptions) with keyword overrides."""
        return self.search_with_plan(query, index, options, **overrides)[0]

    def search_with_plan(
        self,
        query: str,
        index: IndexRef | str | None = None,
        options: SearchOptions | None = None,
        **overrides: Any,
    ) -> tuple[list[SearchResult], ResolvedSearch]:
        """`search`, and the options that ran: an alias's own, the index's defaults filled in."""
        return self.run(SearchRequest.of(query, named(index), options, overrides))

    def run(self, request: SearchRequest) -> tuple[list[SearchResult], ResolvedSearch]:
        """One search request: its results and the options that ran (what a response reports)."""
        results, plan = self._planned([request.query], request.ref, request.options, None)
        assert plan is not None  # one query: always planned
        return results[0], plan

    def search_batch(
        self,
        queries: Sequence[str],
        index: IndexRef | str | None = None,
        options: SearchOptions | None = None,
        *,
        query_vectors: np.ndarray | None = None,
        **overrides: Any,
    ) -> list[list[SearchResult]]:
        """Like `search` for many queries; all query vectors are computed in one embedding call.

        `query_vectors` (one row per query, from the index's own model) skips the query embedding.
        See `retrieval.settings.options.SearchOptions` for the options and `coarse` for the coarse fallback.
        """
        request = SearchOptions.of(options, overrides)
        return self._planned(queries, IndexRef.of(named(index)), request, query_vectors)[0]

    def _planned(
        self,
        queries: Sequence[str],
        ref: IndexRef,
        options: SearchOptions,
        query_vectors: np.ndarray | None,
    ) -> tuple[list[list[SearchResult]], ResolvedSearch | None]:
        if isinstance(queries, str):
            raise SearchError("queries: expected a list of strings, not a single string")
        index, request = self._through_alias(ref, options)
        if request.llm_tokenizer is not None:  # an unknown name is refused where nothing is trimmed too
            llm_tokenizer(request.llm_tokenizer)
        for query in queries:
            if not isinstance(query, str) or not query.strip():
                raise SearchError("query: must be a non-empty string")
        if not queries:
            return [], None
        handle = self._handle(index)
        plan = request.resolve(handle.defaults, handle.name)
        return self._run(list(queries), index, handle, plan, query_vectors), plan

    def _through_alias(self, ref: IndexRef, options: SearchOptions) -> tuple[IndexName, SearchOptions]:
        """An alias becomes its target index, the request's set options over the alias's pinned ones.

        Resolved once per call: every query of the call reads that one target (see `retrieval.query.aliases`).
        """
        if ref.alias is not None:
            with self.store.connection() as conn:
                target = resolve_alias(conn, ref.alias)
            if target is not None:
                return target.served, options.over(target.options)
        return ref.index(default_collection()), options  # a bare config name: one rule everywhere

    # -- composition -----------------------------------------------------------------------------

    def _shape(self, plan: ResolvedSearch) -> Shape:
        """How many candidates each stage keeps for `plan`, its reranker, and whether it embeds."""
        return Shape.of(plan, self._rerankers.get(plan.rerank), self.rerank_candidates)

    def _run(
        self,
        queries: list[str],
        index: str,
        handle: IndexHandle,
        plan: ResolvedSearch,
        given_vectors: np.ndarray | None,
    ) -> list[list[SearchResult]]:
        shape = self._shape(plan)
        vectors, embed_ms = None, 0.0
        if given_vectors is not None:
            vectors = checked_vectors(given_vectors, handle, len(queries))
        elif shape.needs_vectors:
            vectors, embed_ms = embed_queries(self.embedder(handle.name, handle.config), handle, queries)

        coarse_search = None
        speculative = None
        if plan.falls_back:
            coarse_search = functools.partial(
                coarse_stage.coarse_search,
                handle,
                plan.coarse,
                fine_vectors=vectors,
                options=plan.options,
                load_handle=self._handle,
                search_batch=lambda qs, name, options, vs: self.search_batch(
                    qs, name, options, query_vectors=vs
                ),
            )
            if len(queries) <= SPECULATE_MAX_QUERIES:
                speculative = coarse_stage.speculate(functools.partial(coarse_search, queries))
        # without a speculative search, an ambiguous query is answered by the coarse index inside
        # its own read transaction (see `_one`); what cannot be (another model, a coarse index's own
        # fallback) is searched afterwards
        inline = plan.falls_back and speculative is None

        results: list[list[SearchResult]] = []
        gaps: list[float] = []
        totals_ms: list[float] = []
        pending: list[int] = []  # ambiguous queries still to be answered by the coarse index
        for qi, text in enumerate(queries):
            started = time.perf_counter()
            timings = {"embed_ms": embed_ms} if shape.needs_vectors else {}
            query = Query(text, vectors[qi] if vectors is not None else None, plan, shape)
            out, gap, coarse_timings = self._one(query, index, timings, inline)
            gaps.append(gap)
            if coarse_timings is None:
                timings["total_ms"] = (time.perf_counter() - started) * 1000 + timings.get("embed_ms", 0.0)
            totals_ms.append(timings["total_ms"])
            for result in out:
                result.timings = rounded(timings if coarse_timings is None else coarse_timings)
                if plan.coarse is not None and coarse_timings is None:
                    result.scores["fine_gap"] = gap
            if coarse_timings is not None:
                out = coarse_stage.as_coarse_answer(out, gap, timings["total_ms"])
            elif plan.falls_back and gap < plan.coarse.min_gap:  # type: ignore[union-attr]
                pending.append(qi)
            results.append(out)
        if coarse_search is None or not pending:
            return results

        def answers_for(positions: list[int]) -> list[list[SearchResult]]:
            if speculative is not None:
                answers = speculative.result()
                return [answers[qi] for qi in positions]
            subset = None if vectors is None else vectors[positions]
            return coarse_search([queries[qi] for qi in positions], fine_vectors=subset)

        return coarse_stage.coarse_answers(pending, gaps, totals_ms, results, answers_for)

    def _one(
        self, query: Query, index: str, timings: dict[str, float], inline: bool = False
    ) -> tuple[list[SearchResult], float, dict[str, float] | None]:
        """One query through the stages; returns its results, its ranking gap and, when the coarse
        index answered it (`inline`: an ambiguous query is answered by the coarse index in the same
        read transaction), the coarse search's timings (`timings` then holds the fine ranking's, total
        included)."""
        started = time.perf_counter()
        plan = query.plan
        features = self.store.vector_features() if plan.mode != "bm25" else None
        with self.store.connection() as conn, read_transaction(conn):
            handle = self._handles.get(conn, index, begin=True)
            fused, gap = self._rank(conn, handle, query, timings, features)
            coarse = None
            if inline and gap < plan.coarse.min_gap:  # type: ignore[union-attr]
                coarse = self._coarse_plan(conn, handle, plan)
            if coarse is not None:
                # the fine ranking is dropped unread: its rows are never fetched
                timings["total_ms"] = (time.perf_counter() - started) * 1000 + timings.get("embed_ms", 0.0)
                started = time.perf_counter()
                handle, plan = coarse
                query = dataclasses.replace(query, plan=plan, shape=self._shape(plan))
                fine_timings, timings = timings, {"embed_ms": 0.0} if query.shape.needs_vectors else {}
                fused, _ = self._rank(conn, handle, query, timings, features)
            with timed(timings, "fetch_ms"):
                ranked = fused[: max(query.shape.kept(plan), section_pool(plan))]
                ids = [cid for cid, _ in ranked]
                rows = fetch_rows(conn, handle, ids, with_vectors=plan.mmr is not None, commit=True)
        hits: Ranked = [(cid, scores) for cid, scores in ranked if cid in rows]
        reranker, pool = query.shape.reranker, query.shape.pool
        if plan.mmr is not None and query.vector is not None:
            with timed(timings, "mmr_ms"):
                hits = mmr(hits, rows, query.vector, plan.mmr, max(plan.k, pool if reranker else plan.k))
        if reranker is not None:
            with timed(timings, "rerank_ms"):
                hits = rerank(hits[:pool], reranker, query.text, rows)
        out = to_results(handle, hits[: max(plan.k, section_pool(plan))], rows)
        if plan.section_tokens is not None and out:
            with timed(timings, "section_ms"):
                wanted = sorted({r.doc_id for r in out})
                documents = {d.id: d.text for d in self.store.documents.read(handle.name.collection, wanted)}
                tokenizer = llm_tokenizer(plan.llm_tokenizer)
                out = widen_to_sections(out, documents, plan.k, plan.section_tokens, tokenizer)
        weights = None
        if plan.highlights and out:
            with timed(timings, "highlight_ms"):
                terms = handle.analyzer.analyze(query.text)
                weights = self.lexical.term_weights(handle, terms)
                add_highlights(out, terms, handle.analyzer, weights)
        if plan.include_parent and out:
            with timed(timings, "parent_ms"):
                attach_parents(self.store, handle, out, rows)
        if plan.max_context_tokens is not None and out:
            with timed(timings, "budget_ms"):
                tokenizer = llm_tokenizer(plan.llm_tokenizer)
                budget = plan.max_context_tokens
                out = fit_to_budget(out, query.text, handle.analyzer, budget, tokenizer, weights)
        if coarse is None:
            return out, gap, None
        timings["total_ms"] = (time.perf_counter() - started) * 1000 + timings.get("embed_ms", 0.0)
        coarse_timings = timings
        timings = fine_timings
        return out, gap, coarse_timings

    def _coarse_plan(
        self, conn: psycopg.Connection, fine: IndexHandle, plan: ResolvedSearch
    ) -> tuple[IndexHandle, ResolvedSearch] | None:
        """The coarse index and its plan, when it can rank in the fine query's read transaction.

        It can when it uses the fine index's model (the query vector carries over) and has no
        fallback of its own; otherwise (None) the query is searched again afterwards.
        """
        if plan.coarse is None:
            return None
        name = fine.name.sibling(plan.coarse.config)
        try:
            coarse = self._handles.get(conn, name)
        except IndexNotFoundError as exc:
            raise IndexNotFoundError(
                f"index {fine.name!r} falls back to {name!r} for ambiguous queries, but: {exc}"
            ) from exc
        if not coarse_stage.same_model(fine, coarse):
            return None
        coarse_plan = plan.options.request_only().resolve(coarse.defaults, coarse.name)
        return None if coarse_plan.falls_back else (coarse, coarse_plan)

    def _rank(
        self,
        conn: psycopg.Connection,
        handle: IndexHandle,
        query: Query,
        timings: dict[str, float],
        features: VectorFeatures | None,
    ) -> tuple[Ranked, float]:
        """The ranking stages in the caller's read transaction: the ranked candidates and the ranking gap."""
        plan, mode, first_stage = query.plan, query.plan.mode, query.shape.first_stage
        dense: Candidates = []
        lexical: Candidates = []
        if mode != "bm25":
            with timed(timings, "dense_ms"):
                n = first_stage if mode == "dense" else max(first_stage, plan.candidates)
                ef = plan.ef_search or self.ef_search
                dense = dense_candidates(conn, handle, query.vector, n, plan.filters, ef, features)
        if mode != "dense":
            with timed(timings, "bm25_ms"):
                n = first_stage if mode == "bm25" else max(first_stage, plan.candidates)
                top_k = self.lexical.with_feedback if plan.bm25_feedback else self.lexical.top_k
                lexical = top_k(conn, handle, query.text, n, plan.filters)
        with timed(timings, "fuse_ms"):
            crossed = mode == "hybrid_auto" and crosses_languages(query.text, handle.config)
            fused = fuse(
                mode,
                dense,
                lexical,
                plan.rrf_k,
                plan.weight,
                plan.auto_weight,
                cross_language=crossed,
                trust_dense=plan.trust_dense,
            )
        if plan.context.enabled and fused:
            with timed(timings, "context_ms"):
                layout = self._layouts.get(conn, handle)
                statistics = (
                    self._layouts.statistics(conn, handle) if self.context_backend == "memory" else None
                )
                fused = rank_with_context(conn, handle, layout, query, fused, statistics)
        rank = plan.coarse.rank if plan.coarse is not None else COARSE_DEFAULT_RANK
        if plan.collapse and fused:
            with timed(timings, "collapse_ms"):
                # the gap reads the `rank`-th score, or (without context) the whole list's spread
                keep = query.shape.kept(plan)
                limit = max(keep, rank) if plan.context.enabled or plan.coarse is None else None
                fused = collapse_identical_texts(fused, self._layouts.get(conn, handle), limit)
        return fused, coarse_stage.ranking_gap(mode, fused, rank, plan.context.enabled)


# -- the default Searcher of `retrieval.search(...)` -----------------------------------------------

_default: Searcher | None = None
_default_lock = threading.Lock()


def default_searcher() -> Searcher:
    """A Searcher on `retrieval.store.db.database_url()`, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Searcher(Store())
            # registered after the embedded server's own exit hook, so run before it: the pooled
            # connections close before the server stops (no AdminShutdown in a thread at exit)
            atexit.register(_default.store.close)
        return _default
