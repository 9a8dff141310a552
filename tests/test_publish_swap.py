"""Large full builds published by a partition swap (`retrieval.indexing.swap`), on real Postgres: the
same rows as the in-place path, readers on the old version until the swap, the old version intact
after a failure before it."""

from __future__ import annotations

import threading
import time

import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.indexing.bm25 import stage_bm25
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.indexing.embeddings import stage_embeddings
from chunkyard.retrieval.indexing.publish import publish
from chunkyard.retrieval.indexing.stage_reports import PublishReport
from chunkyard.retrieval.indexing.swap import SWAP_MIN_CHUNKS_ENV
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.handles import IndexHandles
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.indexes import next_name, partition_names

from tests.test_indexing_support import (
    ParagraphChunker,
    make_spec,
    publish_under_readers,
    random_unit_vector_for,
)

IN_PLACE = "1000000000"  # a swap threshold no test build reaches
vector_for = random_unit_vector_for(seed_salt="swap")


def corpus(generation: str, n_docs: int = 12, n_paragraphs: int = 6) -> list[Document]:
    return [
        Document(
            f"d{i:02d}.md",
            "\n\n".join(
                f"generation {generation} document {i} paragraph {j} word{(i * j) % 7}"
                for j in range(n_paragraphs)
            ),
        )
        for i in range(n_docs)
    ]


def build(
    store: Store, embedder, spec, documents: list[Document], threshold: str, monkeypatch
) -> PublishReport:
    monkeypatch.setenv(SWAP_MIN_CHUNKS_ENV, threshold)
    store.documents.sync(spec.collection, documents, [])
    chunker = ParagraphChunker(spec.config.config_hash, vector_for=vector_for)
    return build_index(store, spec, embedder, chunker=chunker)


def published(store: Store, index_name: str) -> dict[str, list[tuple]]:
    """Everything a publish writes for the index, without the index's name (to compare two indexes)."""
    parts = partition_names(index_name)
    with store.connection() as conn, conn.cursor(binary=True) as cur:
        return {
            "chunks": cur.execute(
                f'SELECT chunk_id, doc_id, start, "end", text, embed_text, token_count, content_hash, metadata,'
                f" parent_id, bm25_length, embedding::text FROM {parts['chunks']} ORDER BY chunk_id"
            ).fetchall(),
            "postings": cur.execute(
                f"SELECT term, chunk_id, tf, doc_len FROM {parts['postings']} ORDER BY term, chunk_id"
            ).fetchall(),
            "terms": cur.execute(
                "SELECT term, df FROM bm25_terms WHERE index_name = %s ORDER BY term", (index_name,)
            ).fetchall(),
            # idf_sum is a float sum in the heap order of bm25_terms, which differs between two tables
            # filled alike by the other indexes' rows around them: equal to 12 significant digits
            "stats": cur.execute(
                "SELECT n_docs, total_length, vocab_size, round(idf_sum::numeric, 9) FROM bm25_stats"
                " WHERE index_name = %s",
                (index_name,),
            ).fetchall(),
            "documents": cur.execute(
                "SELECT doc_id, sha256 FROM index_documents WHERE index_name = %s ORDER BY doc_id",
                (index_name,),
            ).fetchall(),
        }


def schema_of(store: Store, index_name: str) -> dict[str, object]:
    """The partitions' attachment, their indexes by name, and any table left over from a build."""
    parts = partition_names(index_name)
    with store.connection() as conn:
        attached = conn.execute(
            "SELECT c.relname, p.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent"
            " WHERE c.relname = ANY(%s) ORDER BY 1",
            ([parts["chunks"], parts["postings"]],),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname FROM pg_indexes WHERE tablename = ANY(%s) ORDER BY 1, 2",
            ([parts["chunks"], parts["postings"]],),
        ).fetchall()
        leftovers = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE %s OR relname LIKE %s",
            (parts["chunks"] + "%next%", parts["postings"] + "%next%"),
        ).fetchall()
        checks = conn.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid = ANY(%s::regclass[])",
            ([parts["chunks"], parts["postings"]],),
        ).fetchall()
    return {"attached": attached, "indexes": indexes, "leftovers": leftovers, "checks": checks}


def test_a_swapped_full_build_equals_the_in_place_one_and_later_publishes_work_on_it(
    store, embedder, monkeypatch
) -> None:
    swapped, in_place = make_spec(), make_spec()
    first = build(store, embedder, swapped, corpus("alpha"), "1", monkeypatch)
    reference = build(store, embedder, in_place, corpus("alpha"), IN_PLACE, monkeypatch)
    assert (
        first.version == reference.version == 1 and first.chunks_inserted == reference.chunks_inserted == 72
    )
    assert first.hnsw_built and first.hnsw_seconds is not None
    assert published(store, swapped.name) == published(store, in_place.name)

    parts = partition_names(swapped.name)
    schema = schema_of(store, swapped.name)
    assert [(child, parent) for child, parent, _ in schema["attached"]] == [
        (parts["postings"], "bm25_postings"),
        (parts["chunks"], "chunks"),
    ]
    assert all(bound == f"FOR VALUES IN ('{swapped.name}')" for _, _, bound in schema["attached"])
    assert schema["indexes"] == [
        (parts["postings"], f"{parts['postings']}_index_name_chunk_id_idx"),
        (parts["postings"], f"{parts['postings']}_pkey"),
        (parts["chunks"], parts["hnsw"]),
        (parts["chunks"], f"{parts['chunks']}_index_name_doc_id_idx"),
        (parts["chunks"], f"{parts['chunks']}_pkey"),
    ]
    assert schema["leftovers"] == [] and schema["checks"] == []

    # a full rebuild (another analyzer) swaps again under the same names
    rebuilt = make_spec(collection=swapped.collection, name=swapped.config.name, bm25={"analyzer": "english"})
    again = build(store, embedder, rebuilt, corpus("beta"), "1", monkeypatch)
    assert again.full_rebuild and again.version == 2
    assert again.chunks_deleted == 72 and again.chunks_inserted == 72
    assert schema_of(store, swapped.name) == schema
    rebuilt_ref = make_spec(
        collection=in_place.collection, name=in_place.config.name, bm25={"analyzer": "english"}
    )
    build(store, embedder, rebuilt_ref, corpus("beta"), IN_PLACE, monkeypatch)
    assert published(store, swapped.name) == published(store, in_place.name)

    # an incremental publish applies in place on the swapped partition, whatever the threshold
    changed = corpus("beta")
    changed[3] = Document(changed[3].id, "generation gamma only paragraph")
    update = build(store, embedder, rebuilt, changed, "1", monkeypatch)
    build(store, embedder, rebuilt_ref, changed, IN_PLACE, monkeypatch)
    assert not update.full_rebuild and update.chunks_deleted == 6 and update.chunks_inserted == 1
    assert published(store, swapped.name) == published(store, in_place.name)
    results = Searcher(store, embedder).search("gamma", swapped.name, k=3, mode="bm25")
    assert [r.doc_id for r in results] == ["d03.md"]


def stage_rebuild(store, embedder, spec):
    """Stage a full rebuild of `spec` (another analyzer) over the "beta" corpus; its spec."""
    rebuilt = make_spec(collection=spec.collection, name=spec.config.name, bm25={"analyzer": "english"})
    store.documents.sync(spec.collection, corpus("beta"), [])
    chunker = ParagraphChunker(rebuilt.config.config_hash, vector_for=vector_for)
    stage_chunks(store, rebuilt, chunker=chunker)
    stage_embeddings(store, rebuilt, embedder)
    stage_bm25(store, rebuilt)
    return rebuilt


def prepared_postings(store: Store, index_name: str) -> list[tuple]:
    """The tables left beside the live partitions: the postings the BM25 stage prepared for a swap."""
    parts = partition_names(index_name)
    with store.connection() as conn:
        return conn.execute(
            "SELECT relname FROM pg_class WHERE relname = ANY(%s) ORDER BY 1",
            ([next_name(parts["chunks"]), next_name(parts["postings"])],),
        ).fetchall()


def test_the_bm25_stage_prepares_the_postings_and_a_failed_publish_keeps_them_for_the_retry(
    store, embedder, monkeypatch
) -> None:
    """The postings of a swap are keyed and committed by stage_bm25; a publish failing later (here at
    the version bump, by a trigger) leaves the old version as it was and the staging as it was, so the
    retry publishes without re-running a stage."""
    spec = make_spec()
    build(store, embedder, spec, corpus("alpha"), "1", monkeypatch)
    before, schema = published(store, spec.name), schema_of(store, spec.name)
    rebuilt = stage_rebuild(store, embedder, spec)
    postings_next = next_name(partition_names(spec.name)["postings"])
    assert prepared_postings(store, spec.name) == [(postings_next,)]
    with store.connection() as conn:
        assert (
            conn.execute("SELECT count(*) FROM staged_bm25 WHERE index_name = %s", (spec.name,)).fetchone()[0]
            == 0
        )  # written straight into the next table
        conn.execute(
            "CREATE FUNCTION fail_version_bump() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'version bump refused'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER fail_version_bump BEFORE UPDATE ON indexes FOR EACH ROW"
            f" WHEN (OLD.name = '{spec.name}') EXECUTE FUNCTION fail_version_bump()"
        )
    try:
        with pytest.raises(Exception, match="version bump refused"):
            publish(store, rebuilt)
    finally:
        with store.connection() as conn:
            conn.execute("DROP TRIGGER fail_version_bump ON indexes")
            conn.execute("DROP FUNCTION fail_version_bump()")
    assert store.indexes.info(spec.name)["version"] == 1
    assert published(store, spec.name) == before
    results = Searcher(store, embedder).search("generation paragraph", spec.name, k=5, mode="hybrid")
    assert {r.text.split()[1] for r in results} == {"alpha"} and results[0].index_version == 1
    assert prepared_postings(store, spec.name) == [(postings_next,)]  # no chunks table of the failed build

    report = publish(store, rebuilt)
    assert report.version == 2 and report.chunks_inserted == 72
    assert schema_of(store, spec.name) == schema


def test_re_staging_or_a_smaller_build_drops_the_prepared_postings(store, embedder, monkeypatch) -> None:
    """Postings prepared for a swap that will not come are dropped: by the next run's stage_chunks, and
    by stage_bm25 when the build no longer swaps (then publish applies it in place)."""
    spec = make_spec()
    build(store, embedder, spec, corpus("alpha"), "1", monkeypatch)
    stage_rebuild(store, embedder, spec)
    assert prepared_postings(store, spec.name) != []
    rebuilt = stage_rebuild(store, embedder, spec)  # stage_chunks again, then stage_bm25 prepares anew
    assert prepared_postings(store, spec.name) != []
    chunker = ParagraphChunker(rebuilt.config.config_hash, vector_for=vector_for)
    stage_chunks(store, rebuilt, chunker=chunker)
    assert prepared_postings(store, spec.name) == []

    monkeypatch.setenv(SWAP_MIN_CHUNKS_ENV, "1")
    stage_embeddings(store, rebuilt, embedder)
    stage_bm25(store, rebuilt)
    assert prepared_postings(store, spec.name) != []
    monkeypatch.setenv(SWAP_MIN_CHUNKS_ENV, IN_PLACE)
    stage_bm25(store, rebuilt)
    assert prepared_postings(store, spec.name) == []
    report = publish(store, rebuilt)
    assert report.version == 2 and report.chunks_inserted == 72 and report.full_rebuild

    reference = make_spec(bm25={"analyzer": "english"})
    build(store, embedder, reference, corpus("beta"), IN_PLACE, monkeypatch)
    mine, theirs = published(store, spec.name), published(store, reference.name)
    # the in-place rebuild sums the idfs in another order than a first build: equal to rounding
    assert mine.pop("stats")[0] == pytest.approx(theirs.pop("stats")[0]) and mine == theirs


def test_a_reader_snapshot_taken_before_the_swap_keeps_the_old_rows(store, embedder, monkeypatch) -> None:
    """A REPEATABLE READ reader that looked the index up before the swap reads the old partition
    afterwards too: the swap waits for it (without the read lock it would find the new table empty)."""
    spec = make_spec()
    build(store, embedder, spec, corpus("alpha"), "1", monkeypatch)
    rebuilt = make_spec(collection=spec.collection, name=spec.config.name, bm25={"analyzer": "english"})
    store.documents.sync(spec.collection, corpus("beta", n_docs=13), [])
    chunker = ParagraphChunker(rebuilt.config.config_hash, vector_for=vector_for)
    stage_chunks(store, rebuilt, chunker=chunker)
    stage_embeddings(store, rebuilt, embedder)
    stage_bm25(store, rebuilt)
    chunks = partition_names(spec.name)["chunks"]

    reports: list[object] = []
    with store.connection() as reader:
        handle = IndexHandles().get(reader, spec.name, begin=True)  # BEGIN, read lock, index lookup
        assert handle.version == 1
        publisher = threading.Thread(target=lambda: reports.append(publish(store, rebuilt)))
        publisher.start()
        time.sleep(1.5)
        assert publisher.is_alive() and store.indexes.version(spec.name) == 1  # the swap waits on the reader
        texts = reader.execute(f"SELECT text FROM {chunks}").fetchall()
        assert len(texts) == 72 and {t.split()[1] for (t,) in texts} == {"alpha"}
        reader.execute("COMMIT")
    publisher.join(timeout=60)
    assert not publisher.is_alive() and reports[0].version == 2
    with store.connection() as conn:
        assert conn.execute(f"SELECT count(*) FROM {chunks}").fetchone()[0] == 78
    results = Searcher(store, embedder).search("generation paragraph", spec.name, k=5, mode="hybrid")
    assert {r.text.split()[1] for r in results} == {"beta"} and results[0].index_version == 2


def test_readers_see_the_old_or_the_new_version_across_a_swap(store, embedder, monkeypatch) -> None:
    """A reader hammering hybrid search while a swapped full rebuild publishes: every answer is one version."""
    spec = make_spec(hybrid={"rrf_k": 60, "candidates": 400})
    build(store, embedder, spec, corpus("alpha", n_docs=40, n_paragraphs=10), "1", monkeypatch)
    rebuilt = make_spec(
        collection=spec.collection,
        name=spec.config.name,
        bm25={"analyzer": "english"},
        hybrid={"rrf_k": 60, "candidates": 400},
    )
    store.documents.sync(spec.collection, corpus("beta", n_docs=40, n_paragraphs=10), [])
    chunker = ParagraphChunker(rebuilt.config.config_hash, vector_for=vector_for)
    stage_chunks(store, rebuilt, chunker=chunker)
    stage_embeddings(store, rebuilt, embedder)
    stage_bm25(store, rebuilt)

    report = publish_under_readers(Searcher(store, embedder), spec.name, lambda: publish(store, rebuilt))
    assert report.version == 2 and report.chunks_inserted == report.chunks_deleted == 400


def test_a_staging_written_before_the_terms_table_publishes_the_same_terms(
    store, embedder, monkeypatch
) -> None:
    """Migration 8 counts the document frequencies of a staging that an older release wrote (postings in
    staged_bm25, no staged_bm25_terms), so publishing it after the upgrade loses no term."""
    spec = make_spec()
    build(store, embedder, spec, corpus("alpha"), IN_PLACE, monkeypatch)
    rebuilt = stage_rebuild(store, embedder, spec)  # IN_PLACE: its postings are in staged_bm25
    with store.connection() as conn:
        conn.execute("DELETE FROM staged_bm25_terms WHERE index_name = %s", (spec.name,))
        conn.execute("DELETE FROM schema_migrations WHERE version = 8")
    assert store.migrate() == [8]
    publish(store, rebuilt)

    reference = make_spec(bm25={"analyzer": "english"})
    build(store, embedder, reference, corpus("beta"), IN_PLACE, monkeypatch)
    mine, theirs = published(store, spec.name), published(store, reference.name)
    assert mine["terms"] == theirs["terms"] and len(mine["terms"]) > 0
