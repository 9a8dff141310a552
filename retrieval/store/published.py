"""An index's published rows written from its staging, in place or by a partition swap, and their upkeep."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from chunkyard.retrieval.store.indexes import next_name, partition_names
from chunkyard.retrieval.store.migrations import (
    CHUNK_COLUMNS,
    INDEX_DOCUMENT_COLUMNS,
    POSTING_COLUMNS,
    STAGED_CHUNK_COLUMNS,
    TERM_COLUMNS,
    column_names,
)
from psycopg import Connection, sql
from psycopg.types.json import Jsonb


# An index's published rows written from its staging: the `indexes` row's version, chunks and postings
# partitions, BM25 document frequencies and the documents it was built from (`index_documents`).
#
# Every function runs on the caller's connection and inside its transaction: publish and stage_chunks
# (`retrieval.indexing`) keep their transactions and locks, the statements live here.
def _listed(columns: Sequence[str], prefix: str | None = None) -> sql.Composed:
    """`columns` as a statement's column list, each qualified by the table alias `prefix` if given."""
    if prefix is None:
        return sql.SQL(", ").join(sql.Identifier(name) for name in columns)
    return sql.SQL(", ").join(sql.Identifier(prefix, name) for name in columns)


def lock_index(conn: Connection, index_name: str) -> None:
    """Lock the index's `indexes` row until the transaction ends."""
    conn.execute("SELECT 1 FROM indexes WHERE name = %s FOR UPDATE", (index_name,))


def lock_version(conn: Connection, index_name: str) -> tuple[int, int | None] | None:
    """(published version, vector dimension) of the index, its row locked until the transaction ends;
    None: no such index."""
    row = conn.execute(
        "SELECT version, dim FROM indexes WHERE name = %s FOR UPDATE", (index_name,)
    ).fetchone()
    return None if row is None else (int(row[0]), row[1])


def version_of(conn: Connection, index_name: str) -> int | None:
    """The index's published version (0: never published); None: no such index."""
    row = conn.execute("SELECT version FROM indexes WHERE name = %s", (index_name,)).fetchone()
    return None if row is None else int(row[0])


def republish_config(conn: Connection, index_name: str, config: Jsonb) -> int | None:
    """A new version carrying `config` when it differs from the published one; the new version, or None
    when it is the same (the version is kept)."""
    row = conn.execute(
        "UPDATE indexes SET version = version + 1, published_at = now(), config = %s"
        " WHERE name = %s AND config IS DISTINCT FROM %s RETURNING version",
        (config, index_name, config),
    ).fetchone()
    return None if row is None else int(row[0])


def publish_version(
    conn: Connection, index_name: str, config: Jsonb, config_hash: str, model_id: str | None, dim: int | None
) -> int:
    """Bump the index's version, recording its config, model (None: the one it had) and dimension; the new version."""
    row = conn.execute(
        "UPDATE indexes SET version = version + 1, published_at = now(), config = %s, config_hash = %s,"
        " model_id = coalesce(%s, model_id), dim = %s WHERE name = %s RETURNING version",
        (config, config_hash, model_id, dim, index_name),
    ).fetchone()
    return int(row[0])


def bm25_sizes(conn: Connection, index_name: str) -> tuple[int, int] | None:
    """(chunks, total BM25 length) of the published index from its BM25 statistics (None: none yet),
    kept up to date by each publish."""
    row = conn.execute(
        "SELECT n_docs, total_length FROM bm25_stats WHERE index_name = %s", (index_name,)
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def count_rows(conn: Connection, table: str) -> int:
    """The rows of `table` (a partition, or a table being built beside one)."""
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0])


def count_chunks_of(conn: Connection, partition: str, index_name: str, doc_ids: Sequence[str]) -> int:
    """The index's published chunks of `doc_ids` (by the doc_id index, not a scan of the partition)."""
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE index_name = %s AND doc_id = ANY(%s)").format(
            sql.Identifier(partition)
        ),
        (index_name, list(doc_ids)),
    ).fetchone()
    return int(row[0])


def insert_staged_chunks(conn: Connection, table: str, index_name: str) -> tuple[int, int]:
    """Copy an index's staged chunks, with their vectors and BM25 lengths, into `table` (its partition, or
    the swap's new table); returns (rows, sum of BM25 lengths)."""
    staged = column_names(STAGED_CHUNK_COLUMNS)
    published = column_names(CHUNK_COLUMNS)  # the staged columns, then bm25_length and embedding
    inserted, length = conn.execute(
        sql.SQL(
            "WITH i AS (INSERT INTO {} (index_name, {})"
            " SELECT s.index_name, {}, l.length, e.embedding"
            " FROM staged_chunks s"
            " JOIN staged_embeddings e ON e.index_name = s.index_name AND e.chunk_id = s.chunk_id"
            " JOIN staged_bm25_lengths l ON l.index_name = s.index_name AND l.chunk_id = s.chunk_id"
            " WHERE s.index_name = %s RETURNING bm25_length)"
            " SELECT count(*), coalesce(sum(bm25_length), 0) FROM i"
        ).format(sql.Identifier(table), _listed(published), _listed(staged, "s")),
        (index_name,),
    ).fetchone()
    return int(inserted), int(length)


def insert_staged_postings(conn: Connection, table: str, index_name: str) -> None:
    """Copy an index's staged BM25 postings, with each chunk's length, into `table`."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (index_name, {})"
            " SELECT b.index_name, b.term, b.chunk_id, b.tf, l.length FROM staged_bm25 b"
            " JOIN staged_bm25_lengths l ON l.index_name = b.index_name AND l.chunk_id = b.chunk_id"
            " WHERE b.index_name = %s"
        ).format(sql.Identifier(table), _listed(column_names(POSTING_COLUMNS))),
        (index_name,),
    )


def remove_chunks(
    conn: Connection, index_name: str, chunks: str, postings: str, full_rebuild: bool
) -> tuple[int, int]:
    """Delete from the `chunks` and `postings` partitions the old chunks of the staged removals (on a
    rebuild, all of them) with their postings and document frequencies; returns (chunks deleted, their
    total BM25 length)."""
    chunks_t, postings_t = sql.Identifier(chunks), sql.Identifier(postings)
    conn.execute("CREATE TEMP TABLE _removed (chunk_id text PRIMARY KEY) ON COMMIT DROP")
    removing = conn.execute(
        sql.SQL(
            "INSERT INTO _removed SELECT c.chunk_id FROM {} c WHERE c.index_name = %s"
            " AND (%s OR c.doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s))"
        ).format(chunks_t),
        (index_name, full_rebuild, index_name),
    ).rowcount
    if not removing:  # only added documents
        return 0, 0
    # planner statistics for the temp table: without them it hash-joins a whole postings partition
    # (30 ms at 100k postings) where the chunk_id index finds a one-document removal's rows
    conn.execute("ANALYZE _removed")
    if full_rebuild:  # every chunk goes, so does every term
        delete_terms(conn, index_name)
    else:
        lowered = conn.execute(
            sql.SQL(
                "UPDATE bm25_terms t SET df = t.df - d.n FROM (SELECT p.term, count(*) AS n FROM {} p"
                " JOIN _removed r ON r.chunk_id = p.chunk_id WHERE p.index_name = %s GROUP BY p.term) d"
                " WHERE t.index_name = %s AND t.term = d.term RETURNING t.term, t.df"
            ).format(postings_t),
            (index_name, index_name),
        ).fetchall()
        emptied = [term for term, df in lowered if df <= 0]  # deleted by key: no vocabulary scan
        if emptied:
            conn.execute(
                "DELETE FROM bm25_terms WHERE index_name = %s AND term = ANY(%s) AND df <= 0",
                (index_name, emptied),
            )
    conn.execute(
        sql.SQL(
            "DELETE FROM {} p USING _removed r WHERE p.index_name = %s AND p.chunk_id = r.chunk_id"
        ).format(postings_t),
        (index_name,),
    )
    deleted, length = conn.execute(
        sql.SQL(
            "WITH d AS (DELETE FROM {} c USING _removed r WHERE c.index_name = %s"
            " AND c.chunk_id = r.chunk_id RETURNING c.bm25_length)"
            " SELECT count(*), coalesce(sum(bm25_length), 0) FROM d"
        ).format(chunks_t),
        (index_name,),
    ).fetchone()
    return int(deleted), int(length)


def delete_terms(conn: Connection, index_name: str) -> None:
    """Delete every BM25 document frequency of the index."""
    conn.execute("DELETE FROM bm25_terms WHERE index_name = %s", (index_name,))


def insert_staged_terms(conn: Connection, index_name: str, *, add: bool) -> None:
    """Copy the index's staged document frequencies into `bm25_terms`; with `add`, a term already
    there gets the staged frequency added to its own."""
    listed = _listed(("index_name", *column_names(TERM_COLUMNS)))
    statement = "INSERT INTO bm25_terms ({}) SELECT {} FROM staged_bm25_terms WHERE index_name = %s"
    if add:
        statement += " ON CONFLICT (index_name, term) DO UPDATE SET df = bm25_terms.df + excluded.df"
    conn.execute(sql.SQL(statement).format(listed, listed), (index_name,))


def document_hashes(conn: Connection, collection: str) -> dict[str, str]:
    """doc_id -> sha256 of every document in the collection now."""
    rows = conn.execute(
        "SELECT doc_id, sha256 FROM documents WHERE collection = %s", (collection,)
    ).fetchall()
    return dict(rows)


def built_hashes(conn: Connection, index_name: str) -> dict[str, str]:
    """doc_id -> sha256 of every document the published index was built from."""
    rows = conn.execute(
        "SELECT doc_id, sha256 FROM index_documents WHERE index_name = %s", (index_name,)
    ).fetchall()
    return dict(rows)


def delete_index_documents(conn: Connection, index_name: str, *, removed_only: bool) -> None:
    """Delete the index's `index_documents` rows: all of them, or with `removed_only` those of its staged removals."""
    if removed_only:
        conn.execute(
            "DELETE FROM index_documents WHERE index_name = %s"
            " AND doc_id IN (SELECT doc_id FROM staged_removals WHERE index_name = %s)",
            (index_name, index_name),
        )
    else:
        conn.execute("DELETE FROM index_documents WHERE index_name = %s", (index_name,))


def insert_staged_index_documents(conn: Connection, index_name: str, *, update: bool) -> None:
    """Copy the index's staged documents into `index_documents`; with `update`, a document already there
    takes the staged sha256."""
    listed = _listed(("index_name", *column_names(INDEX_DOCUMENT_COLUMNS)))
    statement = "INSERT INTO index_documents ({}) SELECT {} FROM staged_documents WHERE index_name = %s"
    if update:
        statement += " ON CONFLICT (index_name, doc_id) DO UPDATE SET sha256 = excluded.sha256"
    conn.execute(sql.SQL(statement).format(listed, listed), (index_name,))


def count_index_documents(conn: Connection, index_name: str) -> int:
    """The documents the published index was built from."""
    row = conn.execute("SELECT count(*) FROM index_documents WHERE index_name = %s", (index_name,)).fetchone()
    return int(row[0])


def published_bm25(conn: Connection, index_name: str) -> dict[str, Any] | None:
    """The published index's `bm25` settings (its resolved analyzers included), None before its first publish."""
    row = conn.execute(
        "SELECT config->'bm25' FROM indexes WHERE name = %s AND version > 0", (index_name,)
    ).fetchone()
    return None if row is None else dict(row[0] or {})


# The tables a large full build fills beside an index's live partitions, and their swap for the live ones.
#
# The DDL of `retrieval.indexing.swap`: each function runs in the caller's transaction (the BM25 stage's
# for the postings, the publish's for the chunks and the swap), which keeps its locks to the commit.
# (parent, partition key, its keys and indexes as (suffix, columns, primary key?)) in the live schema
_TABLES = (
    (
        "chunks",
        "chunks",
        (
            ("pkey", ("index_name", "chunk_id"), True),
            ("index_name_doc_id_idx", ("index_name", "doc_id"), False),
        ),
    ),
    (
        "bm25_postings",
        "postings",
        (
            ("pkey", ("index_name", "term", "chunk_id"), True),
            ("index_name_chunk_id_idx", ("index_name", "chunk_id"), False),
        ),
    ),
)


def lock_next(conn: Connection, table: str) -> None:
    """Hold `table` (a next table) to the commit: re-staging the index (which drops it) waits."""
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table)))


def create_next(conn: Connection, index_name: str, kind: str) -> None:
    """An empty table LIKE the parent of the partition `kind`, under the partition's next name, with a
    CHECK of the partition bound (so attaching it scans nothing); a killed build's is dropped first."""
    parent = next(parent for parent, k, _ in _TABLES if k == kind)
    part = next_name(partition_names(index_name)[kind])
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(part)))  # a killed build's
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION,"
            " CONSTRAINT {} CHECK (index_name = {}))"
        ).format(
            sql.Identifier(part),
            sql.Identifier(parent),
            sql.Identifier(f"{part}_key"),
            sql.Literal(index_name),  # DDL takes no parameters; the partition bound is the same literal
        )
    )


def build_keys(conn: Connection, index_name: str, kind: str, work_mem: str) -> None:
    """The primary key and B-trees of the loaded next table of `kind`, built by sort with `work_mem`."""
    live = partition_names(index_name)[kind]
    keys = next(keys for _, k, keys in _TABLES if k == kind)
    set_maintenance_work_mem(conn, work_mem)
    for suffix, columns, primary in keys:
        listed = sql.SQL(", ").join(map(sql.Identifier, columns))
        name = sql.Identifier(next_name(f"{live}_{suffix}"))
        table = sql.Identifier(next_name(live))
        if primary:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(table, name, listed)
            )
        else:
            conn.execute(sql.SQL("CREATE INDEX {} ON {} ({})").format(name, table, listed))


def swap_in(conn: Connection, index_name: str, lock_timeout: str, lock_tries: int) -> None:
    """Drop the live partitions and attach the next tables under their names (see `lock_live` for the
    locks, `lock_timeout` and `lock_tries`)."""
    parts = partition_names(index_name)
    lock_live(conn, parts, lock_timeout, lock_tries)
    for parent, kind, keys in _TABLES:
        live, part = parts[kind], next_name(parts[kind])
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(live)))
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(part), sql.Identifier(live))
        )
        names = [f"{live}_{suffix}" for suffix, _, _ in keys]
        if kind == "chunks":
            names.append(parts["hnsw"])
        for name in names:
            conn.execute(
                sql.SQL("ALTER INDEX IF EXISTS {} RENAME TO {}").format(
                    sql.Identifier(next_name(name)), sql.Identifier(name)
                )
            )
        # the CHECK constraint proves the partition bound: ATTACH scans no row
        conn.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.Identifier(parent), sql.Identifier(live), sql.Literal(index_name)
            )
        )
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                sql.Identifier(live), sql.Identifier(f"{part}_key")
            )
        )


def lock_live(conn: Connection, parts: dict[str, str], lock_timeout: str, lock_tries: int) -> None:
    """The swap's locks: both parents (readers lock `chunks` first, see `retrieval.store.published_chunks.READ_LOCK`) and the
    live partitions. Each of the first `lock_tries - 1` tries waits at most `lock_timeout`, so a long
    reader holds up only the swap, not every reader queued behind it; the last waits as long as it takes."""
    tables = [sql.SQL("ONLY chunks"), sql.SQL("ONLY bm25_postings")]
    tables += [sql.Identifier(parts[kind]) for kind in ("chunks", "postings")]
    statement = sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.SQL(", ").join(tables))
    previous = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
    for attempt in range(lock_tries - 1):
        try:
            with conn.transaction():  # a savepoint: a timed-out try leaves the build intact
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (lock_timeout,))
                conn.execute(statement)
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.1 * 2**attempt)
            continue
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (previous,))
        return
    conn.execute(statement)


# Upkeep of an index's tables: its HNSW graph's DDL, planner statistics (ANALYZE) and VACUUM.
def set_maintenance_work_mem(conn: Connection, size: str) -> None:
    """The memory index builds of the caller's transaction may use (a Postgres size: `512MB`)."""
    conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(size)))


def create_graph(
    conn: Connection,
    table: str,
    name: str,
    dim: int,
    storage: str,
    m: int,
    ef_construction: int,
    work_mem: str,
) -> None:
    """The HNSW index `name` on `table`'s embedding cast to `storage(dim)` (`storage` one of
    VECTOR_STORAGES, checked by the caller), built with `work_mem` and one parallel worker."""
    set_maintenance_work_mem(conn, work_mem)
    conn.execute("SET LOCAL max_parallel_maintenance_workers = 1")
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw ((embedding::{}({})) {}) WITH (m = {}, ef_construction = {})"
        ).format(
            sql.Identifier(name),
            sql.Identifier(table),
            sql.SQL(storage),  # one of VECTOR_STORAGES (checked by the caller)
            sql.Literal(int(dim)),
            sql.Identifier(f"{storage}_cosine_ops"),
            sql.Literal(m),
            sql.Literal(ef_construction),
        )
    )


def relation_exists(conn: Connection, name: str) -> bool:
    """Whether a table or index of this name exists."""
    return conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None


def drop_graph(conn: Connection, name: str) -> None:
    """Drop the HNSW index `name` (it must exist)."""
    conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))


def analyze(conn: Connection, table: str) -> None:
    """Fresh planner statistics for `table`."""
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


def vacuum_analyze(conn: Connection, tables: Iterable[str]) -> None:
    """VACUUM (ANALYZE) each of `tables` (outside a transaction)."""
    for table in tables:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))


def bloated(conn: Connection, tables: Sequence[str], min_dead: int, dead_share: float) -> list[str]:
    """Those of `tables` whose dead rows reach `min_dead` and `dead_share` of their live rows (the counts
    of `pg_stat_user_tables`), sorted by name."""
    return [
        name
        for (name,) in conn.execute(
            "SELECT name FROM (SELECT t.name, to_regclass(quote_ident(t.name)) AS rel"
            " FROM unnest(%s::text[]) AS t(name)) r"
            " WHERE pg_stat_get_dead_tuples(r.rel) >= greatest(%s, %s * pg_stat_get_live_tuples(r.rel))"
            " ORDER BY name",
            (list(tables), min_dead, dead_share),
        ).fetchall()
    ]


def vacuum(conn: Connection, table: str, *, analyze: bool) -> None:
    """VACUUM `table`, leaving it to whoever holds it (SKIP_LOCKED); with `analyze`, also its statistics."""
    options = "SKIP_LOCKED, ANALYZE" if analyze else "SKIP_LOCKED"
    conn.execute(sql.SQL("VACUUM ({}) {}").format(sql.SQL(options), sql.Identifier(table)))
