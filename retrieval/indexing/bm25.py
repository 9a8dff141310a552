"""Stage 3: BM25 term frequencies and lengths of every staged chunk, for the inverted index."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from chunkyard.retrieval.indexing.stage_reports import Bm25StageReport, IndexingError
from chunkyard.retrieval.indexing.staging import analyze_staged, staged_run
from chunkyard.retrieval.indexing.swap import (
    POSTINGS_PREPARED,
    create_next_postings,
    index_next_postings,
    swaps,
)
from chunkyard.retrieval.lexical.code_terms import code_terms
from chunkyard.retrieval.lexical.languages import METADATA_KEY, index_analysis
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store, bm25
from chunkyard.retrieval.store.indexes import drop_next_tables
from chunkyard.retrieval.store.staging import (
    chunks_to_analyze,
    clear_staging,
    copy_postings,
    copy_staged_lengths,
    copy_staged_terms,
    merge_run_report,
    staged_text_by_language,
)

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
    df: Counter[str] = Counter()
    with store.connection() as conn, conn.transaction():
        config_hash, full_rebuild, _ = staged_run(conn, index_name, "stage_bm25", owner)
        if config_hash != spec.config.config_hash:
            raise IndexingError(
                f"stage_bm25: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        analysis = index_analysis(
            spec.config.bm25,
            lambda: None if full_rebuild else bm25.published_bm25(conn, index_name),
            lambda: staged_text_by_language(conn, index_name, METADATA_KEY),
        )
        report.analyzer, report.analyzer_setting = analysis.analyzer.name, analysis.setting
        report.languages = " ".join(f"{lang}={share:.2f}" for lang, share in analysis.languages.items())
        clear_staging(conn, index_name, ("staged_bm25", "staged_bm25_lengths", "staged_bm25_terms"))
        drop_next_tables(conn, index_name)
        # each chunk in its document's language (code chunks, with a `language`, in the main analyzer's)
        rows = chunks_to_analyze(conn, index_name, METADATA_KEY)
        # a large full build's postings go straight into the next version's table, keyed here, so its
        # publish builds only the chunk rows and the graph (retrieval.indexing.swap)
        swapping = swaps(conn, index_name, full_rebuild, len(rows))
        next_postings = create_next_postings(conn, index_name) if swapping else None
        with conn.cursor() as cur:
            with copy_postings(cur, next_postings) as copy:
                lengths = []
                for done, (chunk_id, embed_text, language, is_code) in enumerate(rows, 1):
                    terms = analysis.for_language(language).analyze(embed_text)
                    if is_code:  # never scored for a question's stop words (retrieval.lexical.code_terms)
                        terms = code_terms(terms)
                    lengths.append((index_name, chunk_id, len(terms)))
                    counts = Counter(terms)
                    df.update(counts.keys())
                    for term, tf in counts.items():
                        copy.write_row(
                            (index_name, term, chunk_id, tf, len(terms))
                            if swapping
                            else (index_name, term, chunk_id, tf)
                        )
                    report.postings_staged += len(counts)
                    if progress and (done % PROGRESS_EVERY == 0 or done == len(rows)):
                        progress(done, len(rows))
            copy_staged_lengths(cur, lengths)
            copy_staged_terms(cur, index_name, df)
        if swapping:
            keyed = time.perf_counter()
            index_next_postings(conn, index_name)
            report.postings_keys_seconds = round(time.perf_counter() - keyed, 3)
        analyze_staged(conn, len(rows), "staged_bm25", "staged_bm25_lengths", "staged_bm25_terms")
        report.chunks_analyzed = len(rows)
        report.distinct_terms_staged = len(df)
        report.seconds = report.bm25_stage_seconds = round(time.perf_counter() - started, 3)
        merge_run_report(
            conn,
            index_name,
            {**report.as_metadata(), "bm25_analysis": analysis.as_staged(), POSTINGS_PREPARED: swapping},
        )
    return report
