"""Versioned schema migrations: each runs once, in order, recorded in `schema_migrations`."""

from __future__ import annotations

import psycopg

# Chunk rows and BM25 postings are list-partitioned by index (one partition per index, created by
# the store when an index is registered), so each index has its own HNSW graph.

# Column lists written once: each table's columns after `index_name`, as (name, type), shared by the
# tables that hold the same rows (a chunk staged and published, a document staged and built from) and by
# the statements that copy rows between them (`retrieval.store.staging`, `.published`, `.aliases`).
STAGED_CHUNK_COLUMNS = (
    ("chunk_id", "text NOT NULL"),
    ("doc_id", "text NOT NULL"),
    ("start", "integer NOT NULL"),
    ("end", "integer NOT NULL"),
    ("text", "text NOT NULL"),
    ("embed_text", "text NOT NULL"),
    ("token_count", "integer NOT NULL DEFAULT 0"),
    ("content_hash", "text NOT NULL"),
    ("metadata", "jsonb NOT NULL DEFAULT '{}'::jsonb"),
    ("parent_id", "text"),
)
# a published chunk: the staged one with its BM25 length and vector
CHUNK_COLUMNS = (
    *STAGED_CHUNK_COLUMNS,
    ("bm25_length", "integer NOT NULL DEFAULT 0"),
    ("embedding", "vector"),
)
POSTING_COLUMNS = (
    ("term", "text NOT NULL"),
    ("chunk_id", "text NOT NULL"),
    ("tf", "integer NOT NULL"),
    ("doc_len", "integer NOT NULL"),
)
# a term's document frequency, published (`bm25_terms`) and staged (`staged_bm25_terms`)
TERM_COLUMNS = (("term", "text NOT NULL"), ("df", "integer NOT NULL"))
STATS_COLUMNS = (
    ("n_docs", "bigint NOT NULL"),
    ("total_length", "bigint NOT NULL"),
    ("vocab_size", "bigint NOT NULL"),
    ("idf_sum", "double precision NOT NULL"),
)
# a document an index was built from (`index_documents`) or is about to be (`staged_documents`)
INDEX_DOCUMENT_COLUMNS = (("doc_id", "text NOT NULL"), ("sha256", "text NOT NULL"))


def column_names(columns: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The column names of one of the lists above, in order."""
    return tuple(name for name, _ in columns)


def _definitions(columns: tuple[tuple[str, str], ...]) -> str:
    """`index_name` and `columns` as the lines of a CREATE TABLE (a name SQL reserves, `end`, quoted)."""
    rows = (("index_name", "text NOT NULL"), *columns)
    return ",\n".join(f"    {_RESERVED.get(name, name):<12} {kind}" for name, kind in rows)


_RESERVED = {"end": '"end"'}

# The staging area shared by the indexing stages (per index; emptied on publish and on drop).
STAGING_TABLES = (
    "staged_chunks",
    "staged_embeddings",
    "staged_bm25",
    "staged_bm25_lengths",
    "staged_bm25_terms",
    "staged_removals",
    "staged_documents",
    "staged_runs",
)


# The partitioned tables: (parent, partition key, its keys and indexes as (suffix, columns, primary key?))
PARTITIONED = (
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


MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "documents, indexes, chunks, embedding cache, evaluations",
        """
CREATE TABLE IF NOT EXISTS documents (
    collection  text NOT NULL,
    doc_id      text NOT NULL,
    path        text,
    sha256      text NOT NULL,
    text        text NOT NULL,
    mime_type   text NOT NULL DEFAULT 'text/plain',
    title       text NOT NULL DEFAULT '',
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, doc_id)
);
CREATE TABLE IF NOT EXISTS document_failures (
    collection  text NOT NULL,
    path        text NOT NULL,
    reason      text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, path)
);
CREATE TABLE IF NOT EXISTS indexes (
    name         text PRIMARY KEY,
    collection   text NOT NULL,
    config_name  text NOT NULL,
    config       jsonb NOT NULL,
    config_hash  text NOT NULL,
    partition    text NOT NULL UNIQUE,
    model_id     text,
    dim          integer,
    version      integer NOT NULL DEFAULT 0,
    published_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS chunks (
"""
        + _definitions(CHUNK_COLUMNS)
        + """,
    PRIMARY KEY (index_name, chunk_id)
) PARTITION BY LIST (index_name);
CREATE INDEX IF NOT EXISTS chunks_doc_idx ON chunks (index_name, doc_id);
CREATE TABLE IF NOT EXISTS index_documents (
"""
        + _definitions(INDEX_DOCUMENT_COLUMNS)
        + """,
    PRIMARY KEY (index_name, doc_id)
);
CREATE TABLE IF NOT EXISTS embedding_cache (
    model_id     text NOT NULL,
    content_hash text NOT NULL,
    embedding    vector NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, content_hash)
);
CREATE TABLE IF NOT EXISTS evaluations (
    id            bigserial PRIMARY KEY,
    index_name    text NOT NULL,
    dataset       text NOT NULL,
    index_version integer,
    metrics       jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS evaluations_index_idx ON evaluations (index_name, created_at DESC);
""",
    ),
    (
        2,
        "BM25 inverted index: postings (partitioned by index), document frequencies, corpus stats",
        """
CREATE TABLE IF NOT EXISTS bm25_postings (
"""
        + _definitions(POSTING_COLUMNS)
        + """,
    PRIMARY KEY (index_name, term, chunk_id)
) PARTITION BY LIST (index_name);
CREATE INDEX IF NOT EXISTS bm25_postings_chunk_idx ON bm25_postings (index_name, chunk_id);
CREATE TABLE IF NOT EXISTS bm25_terms (
"""
        + _definitions(TERM_COLUMNS)
        + """,
    PRIMARY KEY (index_name, term)
);
CREATE TABLE IF NOT EXISTS bm25_stats (
"""
        + _definitions(STATS_COLUMNS)
        + """,
    PRIMARY KEY (index_name)
);
""",
    ),
    (
        3,
        "staging area: chunks, vectors, term frequencies and removals waiting for publish",
        """
CREATE TABLE IF NOT EXISTS staged_runs (
    index_name   text PRIMARY KEY,
    config_hash  text NOT NULL,
    full_rebuild boolean NOT NULL DEFAULT false,
    model_id     text,
    report       jsonb NOT NULL DEFAULT '{}'::jsonb,
    staged_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS staged_chunks (
"""
        + _definitions(STAGED_CHUNK_COLUMNS)
        + """,
    PRIMARY KEY (index_name, chunk_id)
);
CREATE TABLE IF NOT EXISTS staged_embeddings (
    index_name text NOT NULL,
    chunk_id   text NOT NULL,
    embedding  vector NOT NULL,
    PRIMARY KEY (index_name, chunk_id)
);
CREATE TABLE IF NOT EXISTS staged_bm25 (
    index_name text NOT NULL,
    chunk_id   text NOT NULL,
    term       text NOT NULL,
    tf         integer NOT NULL
);
CREATE INDEX IF NOT EXISTS staged_bm25_index_idx ON staged_bm25 (index_name);
CREATE TABLE IF NOT EXISTS staged_bm25_lengths (
    index_name text NOT NULL,
    chunk_id   text NOT NULL,
    length     integer NOT NULL,
    PRIMARY KEY (index_name, chunk_id)
);
CREATE TABLE IF NOT EXISTS staged_removals (
    index_name text NOT NULL,
    doc_id     text NOT NULL,
    PRIMARY KEY (index_name, doc_id)
);
CREATE TABLE IF NOT EXISTS staged_documents (
"""
        + _definitions(INDEX_DOCUMENT_COLUMNS)
        + """,
    PRIMARY KEY (index_name, doc_id)
);
""",
    ),
    (
        4,
        "evaluations hold whole reports (EvaluationReport.as_dict); older flat-metric rows stay as history",
        # Rows from before hold flat `mode/metric` floats: kept, and read back as not-a-report
        # (evaluation.runner.latest_reports leaves them out until the index is evaluated again).
        """
ALTER TABLE evaluations RENAME COLUMN metrics TO report;
""",
    ),
    (
        5,
        "serving aliases: immutable targets per generation, and the pointer to the current one",
        # Swapping an alias updates one `aliases` row: readers resolve the old target or the new one.
        """
CREATE TABLE IF NOT EXISTS alias_targets (
    alias         text NOT NULL,
    generation    integer NOT NULL,
    index_name    text NOT NULL,
    index_version integer NOT NULL,
    options       jsonb NOT NULL DEFAULT '{}'::jsonb,
    note          text NOT NULL DEFAULT '',
    scores        jsonb NOT NULL DEFAULT '{}'::jsonb,
    previous      integer,
    set_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (alias, generation)
);
CREATE TABLE IF NOT EXISTS aliases (
    name       text PRIMARY KEY,
    generation integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
""",
    ),
    (
        6,
        "documents remember the stat signature of the file they were read from",
        # A folder sync leaves unread every file whose size, mtime, ctime and inode still match
        # (chunking.documents.folder.scan_folder); NULL: read it next time.
        """
ALTER TABLE documents ADD COLUMN IF NOT EXISTS file_signature text;
""",
    ),
    (
        7,
        "chunk vectors stay inside the row (STORAGE MAIN), the text columns are moved out first",
        # With the default EXTERNAL storage a row of text + embed_text + a 384-dim vector passes the
        # 2 kB TOAST threshold and its vector moves out of line: every exact distance then reads the
        # TOAST table (3k chunks: 12 ms vs 3.5 ms inline, a 3.4x slower exact scan, which the planner
        # does not see). Rows written from now on (a re-index rewrites a partition) keep it inline.
        """
ALTER TABLE chunks ALTER COLUMN embedding SET STORAGE MAIN;
""",
    ),
    (
        8,
        "the BM25 stage stages each term's document frequency",
        # counted while the terms are analysed, so publish copies one row per term instead of grouping
        # every posting (31 s at 40 million postings)
        """
CREATE TABLE IF NOT EXISTS staged_bm25_terms (
"""
        + _definitions(TERM_COLUMNS)
        + """,
    PRIMARY KEY (index_name, term)
);
-- a staging written before this migration publishes with its terms counted here once
INSERT INTO staged_bm25_terms (index_name, term, df)
SELECT index_name, term, count(*) FROM staged_bm25 GROUP BY index_name, term
ON CONFLICT (index_name, term) DO NOTHING;
""",
    ),
    (
        9,
        "API keys (hashed tokens, scopes, collections, limits) and the audit log of admin actions",
        # A token is never stored, only its SHA-256; a revoked key's row stays (the audit log names it).
        """
CREATE TABLE IF NOT EXISTS api_keys (
    name           text PRIMARY KEY,
    token_hash     text NOT NULL UNIQUE,
    scope          text NOT NULL CHECK (scope IN ('search', 'admin')),
    collections    text[] NOT NULL DEFAULT '{}',
    rate_per_s     double precision CHECK (rate_per_s >= 0),
    max_concurrent integer CHECK (max_concurrent >= 0),
    created_by     text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz,
    revoked_at     timestamptz
);
CREATE TABLE IF NOT EXISTS audit_log (
    id     bigserial PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor  text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    before jsonb,
    after  jsonb
);
CREATE INDEX IF NOT EXISTS audit_log_at_idx ON audit_log (at DESC);
""",
    ),
]

_MIGRATION_LOCK_KEY = 0x63686B79  # "chky": serialises concurrent migrate() calls


def apply_migrations(conn: psycopg.Connection) -> list[int]:
    """Apply the migrations not yet applied, in the caller's transaction; return the versions applied."""
    applied: list[int] = []
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    for version, name, statements in MIGRATIONS:
        if version in done:
            continue
        conn.execute(statements)
        conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        applied.append(version)
    return applied


def schema_current(conn: psycopg.Connection) -> bool:
    """Whether every migration is applied (one read, no lock)."""
    try:
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    except psycopg.errors.UndefinedTable:
        return False
    return all(version in done for version, _, _ in MIGRATIONS)


def schema_version(conn: psycopg.Connection) -> int:
    """The latest migration applied (0 before any)."""
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(row[0])
