"""The staging area's SQL: the `staged_runs` row of each index and the `staged_*` rows its stages write."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from chunkyard.retrieval.store.indexes import (
    analyze,
    build_keys,
    create_next,
    drop_next_tables,
    next_name,
    partition_names,
)
from chunkyard.retrieval.store.migrations import (
    INDEX_DOCUMENT_COLUMNS,
    STAGED_CHUNK_COLUMNS,
    STAGING_TABLES,
    column_names,
)
from chunkyard.retrieval.store.staged_rows import (
    Bm25Inputs,
    EmbeddingInputs,
    PostingsStaged,
    StagedRun,
    VectorCheck,
)
from psycopg import Connection, Copy, Cursor, sql
from psycopg.types.json import Jsonb

# Every function runs on the caller's connection (or cursor) and inside its transaction, if any: the
# indexing stages (`retrieval.indexing`) keep their transactions and locks, the statements live here.

BM25_STAGING_TABLES = ("staged_bm25", "staged_bm25_lengths", "staged_bm25_terms")  # what stage_bm25 writes
# the binary COPY type of each column type the staged tables use (its first word in migrations.py)
_COPY_TYPES = {"text": "text", "integer": "int4", "jsonb": "jsonb", "vector": "vector"}


def _listed(columns: Sequence[str]) -> sql.Composed:
    """`index_name` and `columns`, as the column list of a statement."""
    return sql.SQL(", ").join(sql.Identifier(name) for name in ("index_name", *columns))


def _copy_types(columns: Sequence[tuple[str, str]]) -> list[str]:
    """The binary COPY types of `index_name` and `columns` (a list from migrations.py)."""
    return ["text", *(_COPY_TYPES[kind.split()[0]] for _, kind in columns)]


def insert_staged_run(
    conn: Connection, index_name: str, config_hash: str, full_rebuild: bool, report: dict[str, Any]
) -> None:
    """The index's run row, as stage_chunks starts a staging (its report: the owner, if any)."""
    conn.execute(
        "INSERT INTO staged_runs (index_name, config_hash, full_rebuild, report) VALUES (%s, %s, %s, %s)",
        (index_name, config_hash, full_rebuild, Jsonb(report)),
    )


def lock_staged_run(conn: Connection, index_name: str) -> StagedRun | None:
    """The index's run row, locked until the transaction ends (None: nothing staged)."""
    row = conn.execute(
        "SELECT config_hash, full_rebuild, model_id, report->>'owner' FROM staged_runs"
        " WHERE index_name = %s FOR UPDATE",
        (index_name,),
    ).fetchone()
    if row is None:
        return None
    return StagedRun(row[0], bool(row[1]), row[2], row[3])


def _callers(run: StagedRun | None, owner: str | None, config_hash: str | None) -> bool:
    """Whether `run` is the caller's: staged, by `owner` (None: any), with `config_hash` (None: any)."""
    return (
        run is not None
        and (owner is None or run.owner == owner)
        and (config_hash is None or run.config_hash == config_hash)
    )


def start_embeddings(
    conn: Connection, index_name: str, owner: str | None, config_hash: str, model_id: str
) -> EmbeddingInputs:
    """Lock the run row; when `owner` (None: any) staged it with `config_hash`, record `model_id` as the
    run's model and read its staged vectors' count and `chunks_without_vector`. Otherwise only the row
    is returned, for the caller to judge (`indexing.staging.check_run`)."""
    run = lock_staged_run(conn, index_name)
    if not _callers(run, owner, config_hash):
        return EmbeddingInputs(run)
    conn.execute("UPDATE staged_runs SET model_id = %s WHERE index_name = %s", (model_id, index_name))
    # the vectors staged while chunking (late chunking), before this stage
    precomputed = conn.execute(
        "SELECT count(*) FROM staged_embeddings WHERE index_name = %s", (index_name,)
    ).fetchone()[0]
    return EmbeddingInputs(run, int(precomputed), chunks_without_vector(conn, index_name))


def stage_vectors(
    conn: Connection,
    cur: Cursor,
    index_name: str,
    owner: str | None,
    rows: Iterable[tuple[str, str, np.ndarray]],
) -> StagedRun | None:
    """Lock the run row and, when `owner` (None: any) still staged it, COPY the (index_name, chunk_id,
    vector) `rows` into `staged_embeddings`; the row either way, for the caller to judge."""
    run = lock_staged_run(conn, index_name)
    if _callers(run, owner, None):
        copy_staged_embeddings(cur, rows)
    return run


def shard_inputs(
    conn: Connection,
    index_name: str,
    owner: str | None,
    config_hash: str,
    digits: int,
    shards: int,
    shard: int,
) -> tuple[StagedRun | None, list[tuple[str, str]]]:
    """The run row, locked, and, when `owner` (None: any) staged it with `config_hash`, the `shard_texts`
    of shard `shard` of `shards`."""
    run = lock_staged_run(conn, index_name)
    if not _callers(run, owner, config_hash):
        return run, []
    return run, shard_texts(conn, index_name, digits, shards, shard)


def read_staged_run(conn: Connection, index_name: str) -> StagedRun | None:
    """The index's run row with its merged report, unlocked (None: nothing staged)."""
    row = conn.execute(
        "SELECT config_hash, full_rebuild, model_id, report FROM staged_runs WHERE index_name = %s",
        (index_name,),
    ).fetchone()
    if row is None:
        return None
    report = dict(row[3] or {})
    return StagedRun(row[0], bool(row[1]), row[2], report.get("owner"), report)


def merge_run_report(conn: Connection, index_name: str, values: dict[str, Any]) -> None:
    """Add `values` (one stage's report) to the run row's report."""
    conn.execute(
        "UPDATE staged_runs SET report = report || %s WHERE index_name = %s",
        (Jsonb(values), index_name),
    )


def delete_staged(conn: Connection, index_name: str, tables: Iterable[str] = STAGING_TABLES) -> None:
    """Delete the index's rows from the staging `tables`, in one round trip."""
    with conn.pipeline():
        for table in tables:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE index_name = %s").format(sql.Identifier(table)), (index_name,)
            )


def open_run(
    conn: Connection,
    index_name: str,
    config_hash: str,
    full_rebuild: bool,
    report: dict[str, Any],
    removals: Sequence[str],
) -> None:
    """Start the index's staging as stage_chunks does, on its transaction, once it dropped the tables
    prepared for a swap (`indexes.drop_next_tables`): the staged rows deleted, the run row inserted
    (`report`: the owner, if any) and the removal of `removals` (changed and deleted documents) staged."""
    delete_staged(conn, index_name)
    insert_staged_run(conn, index_name, config_hash, full_rebuild, report)
    if removals:
        insert_removals(conn, index_name, removals)


def stage_chunk_batch(
    cur: Cursor,
    index_name: str,
    documents: Sequence[tuple[str, str]],
    chunks: Iterable[tuple[Any, ...]],
    vectors: Sequence[tuple[str, str, np.ndarray]],
) -> None:
    """One batch of stage_chunks: the (doc_id, sha256) of its documents (`insert_staged_documents`), their
    chunk rows (`copy_staged_chunks`) and the vectors computed while chunking, if any."""
    insert_staged_documents(cur, index_name, documents)
    copy_staged_chunks(cur, chunks)
    if vectors:
        copy_staged_embeddings(cur, vectors)


def clear_staging(conn: Connection, index_name: str, tables: tuple[str, ...] | None = None) -> None:
    """Empty the index's staging area (all of it, postings prepared for a swap included, unless `tables`
    names some), in one round trip."""
    if tables is None:
        drop_next_tables(conn, index_name)
        delete_staged(conn, index_name)
    else:
        delete_staged(conn, index_name, tables)


def empty_staging_for_swap(conn: Connection, index_name: str) -> None:
    """Empty the index's staging: TRUNCATE each table that holds no other index's rows (deleting a
    million rows one by one is slower than the swap's whole build), DELETE from the others."""
    for table in STAGING_TABLES:
        ident = sql.Identifier(table)
        others = conn.execute(
            sql.SQL(
                "SELECT EXISTS (SELECT 1 FROM {0} WHERE index_name < %s)"
                " OR EXISTS (SELECT 1 FROM {0} WHERE index_name > %s)"
            ).format(ident),
            (index_name, index_name),
        ).fetchone()[0]
        if not others:
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(ident))
            # checked again under the lock: a stage of another index may have written meanwhile
            others = conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE index_name <> %s)").format(ident),
                (index_name,),
            ).fetchone()[0]
        if others:
            conn.execute(sql.SQL("DELETE FROM {} WHERE index_name = %s").format(ident), (index_name,))
        else:
            conn.execute(sql.SQL("TRUNCATE {}").format(ident))


def insert_removals(conn: Connection, index_name: str, doc_ids: Sequence[str]) -> None:
    """Stage the removal of the index's old chunks of `doc_ids` (changed and deleted documents)."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO staged_removals (index_name, doc_id) VALUES (%s, %s)",
            [(index_name, d) for d in doc_ids],
        )


def insert_staged_documents(cur: Cursor, index_name: str, documents: Sequence[tuple[str, str]]) -> None:
    """Stage the (doc_id, sha256) of the documents being chunked: what the index is built from once published."""
    cur.executemany(
        sql.SQL("INSERT INTO staged_documents ({}) VALUES (%s, %s, %s)").format(
            _listed(column_names(INDEX_DOCUMENT_COLUMNS))
        ),
        [(index_name, doc_id, sha256) for doc_id, sha256 in documents],
    )


def copy_staged_chunks(cur: Cursor, rows: Iterable[tuple[Any, ...]]) -> None:
    """COPY chunk rows (index_name, then the columns of STAGED_CHUNK_COLUMNS, in order) into `staged_chunks`."""
    statement = sql.SQL("COPY staged_chunks ({}) FROM STDIN (FORMAT BINARY)").format(
        _listed(column_names(STAGED_CHUNK_COLUMNS))
    )
    with cur.copy(statement) as copy:
        copy.set_types(_copy_types(STAGED_CHUNK_COLUMNS))
        for row in rows:
            copy.write_row(row)


def copy_staged_embeddings(cur: Cursor, rows: Iterable[tuple[str, str, np.ndarray]]) -> None:
    """COPY (index_name, chunk_id, vector) rows into `staged_embeddings`."""
    with cur.copy(
        "COPY staged_embeddings (index_name, chunk_id, embedding) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["text", "text", "vector"])
        for row in rows:
            copy.write_row(row)


@contextmanager
def copy_postings(cur: Cursor, table: str | None) -> Iterator[Copy]:
    """A COPY of BM25 postings: into `staged_bm25` as (index_name, term, chunk_id, tf) rows, or, with
    `table` (the next version's postings table of a swap), as (index_name, term, chunk_id, tf, doc_len)."""
    if table is not None:
        target = sql.SQL("COPY {} (index_name, term, chunk_id, tf, doc_len) FROM STDIN (FORMAT BINARY)")
        statement = target.format(sql.Identifier(table))
    else:
        statement = sql.SQL("COPY staged_bm25 (index_name, term, chunk_id, tf) FROM STDIN (FORMAT BINARY)")
    with cur.copy(statement) as copy:
        copy.set_types(
            ["text", "text", "text", "int4", "int4"] if table is not None else ["text"] * 3 + ["int4"]
        )
        yield copy


def copy_staged_lengths(cur: Cursor, rows: Iterable[tuple[str, str, int]]) -> None:
    """COPY (index_name, chunk_id, BM25 length) rows into `staged_bm25_lengths`."""
    with cur.copy(
        "COPY staged_bm25_lengths (index_name, chunk_id, length) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["text", "text", "int4"])
        for row in rows:
            copy.write_row(row)


def copy_staged_terms(cur: Cursor, index_name: str, df: Mapping[str, int]) -> None:
    """COPY the index's document frequency of each term into `staged_bm25_terms`."""
    with cur.copy("COPY staged_bm25_terms (index_name, term, df) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["text", "text", "int4"])
        for term, count in df.items():
            copy.write_row((index_name, term, count))


def staged_counts(conn: Connection, index_name: str) -> tuple[int, int]:
    """(staged chunks, staged removals) of the index."""
    chunks, removals = conn.execute(
        "SELECT (SELECT count(*) FROM staged_chunks WHERE index_name = %s),"
        " (SELECT count(*) FROM staged_removals WHERE index_name = %s)",
        (index_name, index_name),
    ).fetchone()
    return int(chunks), int(removals)


def missing_vectors_and_terms(conn: Connection, index_name: str) -> tuple[int, int]:
    """(staged chunks without a staged vector, staged chunks without a BM25 length) of the index."""
    vectors, terms = conn.execute(
        "SELECT count(*) FILTER (WHERE e.chunk_id IS NULL), count(*) FILTER (WHERE l.chunk_id IS NULL)"
        " FROM staged_chunks s"
        " LEFT JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
        " LEFT JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
        " WHERE s.index_name = %s",
        (index_name,),
    ).fetchone()
    return int(vectors), int(terms)


def compare_with_cache(conn: Connection, index_name: str, model_id: str) -> VectorCheck:
    """Each staged vector of the index against the cache's vector (of `model_id`) for its content hash."""
    checked, wrong, example = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE c.embedding IS DISTINCT FROM e.embedding),"
        " min(s.chunk_id) FILTER (WHERE c.embedding IS DISTINCT FROM e.embedding)"
        " FROM staged_chunks s JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
        " LEFT JOIN embedding_cache c ON c.model_id = %s AND c.content_hash = s.content_hash"
        " WHERE s.index_name = %s",
        (model_id, index_name),
    ).fetchone()
    return VectorCheck(int(checked), int(wrong), example)


def staged_dims(conn: Connection, index_name: str) -> list[tuple[int]]:
    """The distinct dimensions of the index's staged vectors, as rows (one row each)."""
    return conn.execute(
        "SELECT DISTINCT vector_dims(embedding) FROM staged_embeddings WHERE index_name = %s",
        (index_name,),
    ).fetchall()


def chunks_without_vector(conn: Connection, index_name: str) -> list[tuple[str, str, str]]:
    """(chunk_id, content_hash, embed_text) of the index's staged chunks with no staged vector, by chunk id."""
    return conn.execute(
        "SELECT s.chunk_id, s.content_hash, s.embed_text FROM staged_chunks s"
        " WHERE s.index_name = %s AND NOT EXISTS (SELECT 1 FROM staged_embeddings e"
        " WHERE e.index_name = s.index_name AND e.chunk_id = s.chunk_id) ORDER BY s.chunk_id",
        (index_name,),
    ).fetchall()


def shard_texts(
    conn: Connection, index_name: str, digits: int, shards: int, shard: int
) -> list[tuple[str, str]]:
    """(content_hash, embed_text), one per content hash, of the staged chunks with no staged vector whose
    hash's first `digits` hex digits modulo `shards` are `shard`."""
    return conn.execute(
        "SELECT DISTINCT ON (s.content_hash) s.content_hash, s.embed_text FROM staged_chunks s"
        " WHERE s.index_name = %s AND NOT EXISTS (SELECT 1 FROM staged_embeddings e"
        " WHERE e.index_name = s.index_name AND e.chunk_id = s.chunk_id)"
        " AND (('x' || substr(s.content_hash, 1, %s))::bit(28)::integer) %% %s = %s",
        (index_name, digits, shards, shard),
    ).fetchall()


def start_bm25(
    conn: Connection, index_name: str, owner: str | None, config_hash: str, language_key: str
) -> Bm25Inputs:
    """Lock the run row; when `owner` (None: any) staged it with `config_hash`, read what stage_bm25
    analyses: a chunk's language is the metadata's `language_key`, None for a code chunk (one whose
    metadata has a `language`). Otherwise only the row is returned, for the caller to judge."""
    run = lock_staged_run(conn, index_name)
    if not _callers(run, owner, config_hash):
        return Bm25Inputs(run)
    chunks = conn.execute(
        "SELECT chunk_id, embed_text, CASE WHEN metadata ? 'language' THEN NULL ELSE metadata->>%s END,"
        " metadata ? 'language', length(text) FROM staged_chunks WHERE index_name = %s",
        (language_key, index_name),
    ).fetchall()
    text_by_language: dict[str, int] = {}
    for _, _, language, is_code, chars in chunks:
        if not is_code:
            text_by_language[language or ""] = text_by_language.get(language or "", 0) + int(chars)
    row = conn.execute(
        "SELECT version, config->'bm25' FROM indexes WHERE name = %s", (index_name,)
    ).fetchone()
    if row is None:
        return Bm25Inputs(run, chunks, text_by_language)
    version = int(row[0])
    return Bm25Inputs(run, chunks, text_by_language, version, dict(row[1] or {}) if version > 0 else None)


def stage_postings(
    conn: Connection,
    index_name: str,
    analyzed: Iterable[tuple[str, list[str]]],
    swap_work_mem: str | None,
    written: Callable[[int], None] | None = None,
) -> PostingsStaged:
    """Replace the index's staged BM25 rows by those of `analyzed`, each chunk's (chunk_id, terms), on the
    caller's transaction; tables prepared for a swap are dropped first. With `swap_work_mem` (the build
    is published by a swap), the postings go into the next version's table instead of `staged_bm25`,
    whose keys are then built by sort with that memory and analyzed. `written(chunks)` is called as
    each chunk's postings are written."""
    delete_staged(conn, index_name, BM25_STAGING_TABLES)
    drop_next_tables(conn, index_name)
    table = None
    if swap_work_mem is not None:
        create_next(conn, index_name, "postings")
        table = next_name(partition_names(index_name)["postings"])
    df: Counter[str] = Counter()
    lengths: list[tuple[str, str, int]] = []
    postings = 0
    with conn.cursor() as cur:
        with copy_postings(cur, table) as copy:
            for done, (chunk_id, terms) in enumerate(analyzed, 1):
                counts, length = Counter(terms), len(terms)
                lengths.append((index_name, chunk_id, length))
                df.update(counts.keys())
                for term, tf in counts.items():
                    copy.write_row(
                        (index_name, term, chunk_id, tf, length)
                        if table is not None
                        else (index_name, term, chunk_id, tf)
                    )
                postings += len(counts)
                if written is not None:
                    written(done)
        copy_staged_lengths(cur, lengths)
        copy_staged_terms(cur, index_name, df)
    if table is None or swap_work_mem is None:
        return PostingsStaged(postings, len(df), None)
    keyed = time.perf_counter()
    build_keys(conn, index_name, "postings", swap_work_mem)
    analyze(conn, table)
    return PostingsStaged(postings, len(df), round(time.perf_counter() - keyed, 3))
