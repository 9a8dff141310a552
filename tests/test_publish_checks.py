"""The published span check after an incremental publish: it reads the written documents only, yet
still fails when any other document's text no longer matches what the index was built from."""

from __future__ import annotations

from pathlib import Path

from chunkyard.chunking.documents.folder import load_folder
from chunkyard.pipeline import checks
from chunkyard.pipeline.step_report import StepRun
from chunkyard.pipeline.steps.publish import step_publish
from chunkyard.retrieval.indexing.bm25 import stage_bm25
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.store import integrity

from tests.test_indexing_support import ParagraphChunker, make_spec

TEXTS = {
    f"doc{i}.txt": f"Paragraph one of document {i} about topic {i}.\n\nParagraph two of document {i}.\n"
    for i in range(5)
}


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in TEXTS.items():
        (folder / name).write_text(text)
    return folder


def _publish(store, embedder, spec, folder: Path) -> checks.Check:
    documents, failures = load_folder(folder)
    store.documents.sync(spec.collection, documents, failures)
    stage_chunks(store, spec, chunker=ParagraphChunker(spec.config.config_hash))
    stage_embeddings(store, spec, embedder)
    stage_bm25(store, spec)
    step = step_publish(store, spec, None, StepRun())
    return next(c for c in step.checks if c.name == "published_spans_match")


def test_an_incremental_publish_checks_the_written_documents_and_the_hashes_of_the_rest(
    store, embedder, tmp_path
) -> None:
    folder = _folder(tmp_path)
    spec = make_spec()

    first = _publish(store, embedder, spec, folder)
    assert first.passed, first.metadata
    assert first.metadata["documents_checked"] == 5 and first.metadata["chunks_checked"] == 10

    (folder / "doc2.txt").write_text(TEXTS["doc2.txt"] + "\nA third paragraph about zebras.\n")
    update = _publish(store, embedder, spec, folder)
    assert update.passed, update.metadata
    assert update.metadata["documents_checked"] == 1 and update.metadata["chunks_checked"] == 3
    assert update.metadata["documents_changed_since_indexed"] == 0

    # A document's stored text changes under the published index (nothing re-indexed it): the
    # scoped check still fails and names it; the whole-index check fails on its spans.
    with store.connection() as conn:
        conn.execute(
            "UPDATE documents SET text = upper(text), sha256 = 'edited' WHERE collection = %s AND doc_id = 'doc4.txt'",
            (spec.collection,),
        )
    scoped = checks.check_spans(integrity.spans(store, spec.collection, spec.name, "published", ["doc2.txt"]))
    assert not scoped.passed
    assert scoped.metadata["documents_changed_since_indexed"] == 1
    assert "doc4.txt (text changed since it was indexed)" in scoped.metadata["examples"]
    whole = checks.check_spans(integrity.spans(store, spec.collection, spec.name, "published"))
    assert not whole.passed and whole.metadata["span_mismatches"] == 2
    assert whole.metadata["chunks_checked"] == 11


def test_incremental_publishes_keep_the_bm25_sizes_of_a_full_scan_and_the_check_catches_drift(
    store, embedder, tmp_path
) -> None:
    folder = _folder(tmp_path)
    spec = make_spec()

    def published_sizes() -> tuple[tuple, tuple]:
        with store.connection() as conn:
            stats = conn.execute(
                "SELECT n_docs, total_length FROM bm25_stats WHERE index_name = %s", (spec.name,)
            ).fetchone()
            scanned = conn.execute(
                "SELECT count(*), coalesce(sum(bm25_length), 0) FROM chunks WHERE index_name = %s",
                (spec.name,),
            ).fetchone()
        return tuple(stats), tuple(scanned)

    assert _publish(store, embedder, spec, folder).passed
    (folder / "doc1.txt").write_text(
        TEXTS["doc1.txt"] + "\nA longer third paragraph about zebras and okapis.\n"
    )
    (folder / "doc3.txt").unlink()
    (folder / "doc9.txt").write_text("Document nine, added later.\n\nIts second paragraph is about herons.\n")
    assert _publish(store, embedder, spec, folder).passed
    stats, scanned = published_sizes()
    assert stats == scanned and stats[0] == 11  # 5 docs x 2, +1 paragraph, -2 deleted, +2 added

    with store.connection() as conn:  # the stored total drifts from the chunks (a bug, a hand edit)
        conn.execute(
            "UPDATE bm25_stats SET total_length = total_length + 1 WHERE index_name = %s", (spec.name,)
        )
    drift = checks.check_bm25_counts(integrity.bm25_counts(store, spec.name))
    assert not drift.passed
    assert drift.metadata["bm25_total_length"] == drift.metadata["chunks_total_length"] + 1
