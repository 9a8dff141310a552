"""Stage 3: BM25 term frequencies and lengths of every staged chunk, for the inverted index."""

from __future__ import annotations

import time
from collections import Counter

from retrieval.config import IndexSpec
from retrieval.indexing.reports import Bm25StageReport, IndexingError
from retrieval.indexing.staging import analyze_staged, clear_staging, merge_stage_report, staged_run
from retrieval.languages import METADATA_KEY, index_analysis
from retrieval.store import Store


def stage_bm25(store: Store, spec: IndexSpec, *, owner: str | None = None) -> Bm25StageReport:
    """Term frequencies and lengths of every staged chunk's `embed_text`, for the inverted index.

    `analyzer: auto` is resolved here (`retrieval.languages.index_analysis`), each chunk analysed in
    its document's language; the choice is staged for publish, which records it in the published config. Writes only while `owner` owns the staging.
    """
    started = time.perf_counter()
    index_name = spec.name
    report = Bm25StageReport(index=index_name)
    terms_seen: set[str] = set()
    with store.connection() as conn, conn.transaction():
        config_hash, full_rebuild, _ = staged_run(conn, index_name, "stage_bm25", owner)
        if config_hash != spec.config.config_hash:
            raise IndexingError(
                f"stage_bm25: {index_name!r} was staged with another config; re-run stage_chunks"
            )
        analysis = index_analysis(conn, index_name, spec.config.bm25, full_rebuild=full_rebuild)
        report.analyzer, report.analyzer_setting = analysis.analyzer.name, analysis.setting
        report.languages = " ".join(f"{lang}={share:.2f}" for lang, share in analysis.languages.items())
        clear_staging(conn, index_name, ("staged_bm25", "staged_bm25_lengths"))
        # each chunk in its document's language (code chunks, with a `language`, in the main analyzer's)
        rows = conn.execute(
            "SELECT chunk_id, embed_text, CASE WHEN metadata ? 'language' THEN NULL ELSE metadata->>%s END"
            " FROM staged_chunks WHERE index_name = %s",
            (METADATA_KEY, index_name),
        ).fetchall()
        with conn.cursor() as cur:
            with cur.copy(
                "COPY staged_bm25 (index_name, chunk_id, term, tf) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "text", "int4"])
                lengths = []
                for chunk_id, embed_text, language in rows:
                    terms = analysis.for_language(language).analyze(embed_text)
                    lengths.append((index_name, chunk_id, len(terms)))
                    for term, tf in Counter(terms).items():
                        copy.write_row((index_name, chunk_id, term, tf))
                        report.postings_staged += 1
                        terms_seen.add(term)
            with cur.copy(
                "COPY staged_bm25_lengths (index_name, chunk_id, length) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "int4"])
                for row in lengths:
                    copy.write_row(row)
        analyze_staged(conn, len(rows), "staged_bm25", "staged_bm25_lengths")
        report.chunks_analyzed = len(rows)
        report.distinct_terms_staged = len(terms_seen)
        report.seconds = report.bm25_stage_seconds = round(time.perf_counter() - started, 3)
        merge_stage_report(conn, index_name, {**report.as_metadata(), "bm25_analysis": analysis.as_staged()})
    return report
