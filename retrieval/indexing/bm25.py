"""Stage 3: BM25 term frequencies and lengths of every staged chunk, for the inverted index."""

from __future__ import annotations

import time
from collections.abc import Callable

from chunkyard.retrieval.indexing.hnsw import maintenance_work_mem
from chunkyard.retrieval.indexing.stage_reports import Bm25StageReport
from chunkyard.retrieval.indexing.staging import analyze_staged, check_run
from chunkyard.retrieval.indexing.swap import POSTINGS_PREPARED, swaps
from chunkyard.retrieval.lexical.languages import METADATA_KEY, index_analysis
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store import staging as staging_rows

PROGRESS_EVERY = 500  # chunks between progress calls


def stage_bm25(
    store: Store,
    spec: IndexSpec,
    *,
    owner: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Bm25StageReport:
    """Term frequencies and lengths of every staged chunk's `embed_text`, for the inverted index.

    `analyzer: auto` is resolved here (`retrieval.lexical.languages.index_analysis`), each chunk analysed in
    its document's language; the choice is staged for publish, which records it in the published config. Writes only while `owner` owns the staging.
    `progress(done, total)` is called with the chunks analysed, every few hundred and at the end.
    """
    started = time.perf_counter()
    index_name = spec.name
    report = Bm25StageReport(index=index_name)
    with store.connection() as conn, conn.transaction():
        # the run row locked until commit; its chunks, and the index's published state, read at once
        inputs = staging_rows.start_bm25(conn, index_name, owner, spec.config.config_hash, METADATA_KEY)
        run = check_run("stage_bm25", index_name, owner, inputs.run, spec.config.config_hash)
        analysis = index_analysis(
            spec.config.bm25,
            lambda: None if run.full_rebuild else inputs.published_bm25,
            lambda: inputs.text_by_language,
        )
        staged_analysis = analysis.as_staged()
        report.analyzer, report.analyzer_setting = analysis.analyzer.name, analysis.setting
        report.languages = " ".join(f"{lang}={share:.2f}" for lang, share in analysis.languages.items())
        rows = inputs.chunks
        # a large full build's postings go straight into the next version's table, keyed here, so its
        # publish builds only the chunk rows and the graph (retrieval.indexing.swap)
        swapping = swaps(run.full_rebuild, len(rows), inputs.version)
        # each chunk in its document's language (code chunks, with a `language`, in the main analyzer's)
        analyzed = (
            (chunk_id, analysis.chunk_terms(embed_text, language, is_code))
            for chunk_id, embed_text, language, is_code, _ in rows
        )
        total = len(rows)
        written = staging_rows.stage_postings(
            conn,
            index_name,
            analyzed,
            maintenance_work_mem() if swapping else None,
            # `progress` every PROGRESS_EVERY chunks written and at the end
            None
            if progress is None
            else lambda done: progress(done, total) if done % PROGRESS_EVERY == 0 or done == total else None,
        )
        if written.keys_seconds is not None:
            report.postings_keys_seconds = written.keys_seconds
        analyze_staged(conn, len(rows), *staging_rows.BM25_STAGING_TABLES)
        report.chunks_analyzed = len(rows)
        report.postings_staged = written.postings
        report.distinct_terms_staged = written.distinct_terms
        report.seconds = report.bm25_stage_seconds = round(time.perf_counter() - started, 3)
        staging_rows.merge_run_report(
            conn,
            index_name,
            {**report.as_metadata(), "bm25_analysis": staged_analysis, POSTINGS_PREPARED: swapping},
        )
    return report
