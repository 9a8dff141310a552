"""BM25 over an inverted index persisted in Postgres, and what context scoring reads from its postings."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

# The analyzers and parameters live in retrieval.lexical; these names stay importable from here.
from chunkyard.retrieval.lexical.analysis import (  # noqa: F401
    ANALYZERS,
    ENGLISH_STOPWORDS,
    SPANISH_STOPWORDS,
    Analyzer,
    AnalyzerConfigError,
    TermAnalyzer,
    build_analyzer,
)
from chunkyard.retrieval.lexical.bm25_params import DEFAULT_PARAMS, Bm25Params  # noqa: F401
from chunkyard.retrieval.store.published_chunks import LAYOUT_ORDER, READ_LOCK, copy_bytes
from psycopg import sql


# BM25 (rank-bm25 `BM25Okapi` semantics) over an inverted index persisted in Postgres.
#
# Scoring, identical to `rank_bm25.BM25Okapi(k1, b, epsilon).get_scores` on the same tokens:
#
#     idf(t)   = ln(N - df + 0.5) - ln(df + 0.5), and when negative: epsilon * mean idf over the vocabulary
#     score(d) = sum over query tokens q (repeats count again) of
#                idf(q) * tf(q, d) * (k1 + 1) / (tf(q, d) + k1 * (1 - b + b * len(d) / avgdl))
#
# Postgres holds postings (term, chunk, tf, doc length), document frequencies and corpus stats
# (N, total length, vocabulary size, sum of raw idf); they are updated incrementally at publish.
# `MemoryBm25` is a compact in-memory copy (scipy sparse) for services and evaluation sweeps.
@dataclass(frozen=True)
class CorpusStats:
    n_docs: int
    total_length: int
    vocab_size: int
    idf_sum: float

    @property
    def avgdl(self) -> float:
        return self.total_length / self.n_docs if self.n_docs else 0.0

    def epsilon_idf(self, epsilon: float) -> float:
        """rank-bm25's floor for negative idf: epsilon times the mean raw idf over the vocabulary."""
        return epsilon * (self.idf_sum / self.vocab_size) if self.vocab_size else 0.0

    def idf(self, df: int, epsilon: float) -> float:
        value = math.log(self.n_docs - df + 0.5) - math.log(df + 0.5)
        return self.epsilon_idf(epsilon) if value < 0 else value


def load_stats(conn: Any, index_name: str) -> CorpusStats | None:
    row = conn.execute(
        "SELECT n_docs, total_length, vocab_size, idf_sum FROM bm25_stats WHERE index_name = %s",
        (index_name,),
    ).fetchone()
    if row is None:
        return None
    return CorpusStats(int(row[0]), int(row[1]), int(row[2]), float(row[3]))


def refresh_stats(
    conn: Any, index_name: str, chunks_partition: str, sizes: tuple[int, int] | None = None
) -> CorpusStats:
    """Recompute N, total length, vocabulary size and the raw idf sum (inside the publish transaction).

    `sizes` (N, total length), when the caller knows them from the rows it removed and added, spares
    the scan of the whole partition; the idf sum depends on N for every term, so it is summed again.
    """
    if sizes is None:
        sizes = conn.execute(
            sql.SQL("SELECT count(*), coalesce(sum(bm25_length), 0) FROM {}").format(
                sql.Identifier(chunks_partition)
            )
        ).fetchone()
    n_docs, total_length = sizes
    vocab_size, idf_sum = conn.execute(
        # float8, as rank-bm25's math.log: ln() on numeric costs 20x more (60 ms at 11k terms)
        "SELECT count(*), coalesce(sum(ln(%s - df + 0.5::float8) - ln(df + 0.5::float8)), 0)"
        " FROM bm25_terms WHERE index_name = %s",
        (int(n_docs), index_name),
    ).fetchone()
    conn.execute(
        "INSERT INTO bm25_stats (index_name, n_docs, total_length, vocab_size, idf_sum)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (index_name) DO UPDATE SET n_docs = excluded.n_docs,"
        " total_length = excluded.total_length, vocab_size = excluded.vocab_size, idf_sum = excluded.idf_sum",
        (index_name, int(n_docs), int(total_length), int(vocab_size), float(idf_sum)),
    )
    return CorpusStats(int(n_docs), int(total_length), int(vocab_size), float(idf_sum))


def queue_statistics(conn: Any, index_name: str, terms: list[str]) -> tuple[Any, Any]:
    """Cursors for the index's BM25 totals and the terms' document frequencies (sent in the caller's pipeline)."""
    stats_cursor = conn.execute(
        "SELECT n_docs, total_length, vocab_size, idf_sum FROM bm25_stats WHERE index_name = %s",
        (index_name,),
    )
    df_cursor = conn.execute(
        "SELECT term, df FROM bm25_terms WHERE index_name = %s AND term = ANY(%s)", (index_name, terms)
    )
    return stats_cursor, df_cursor


def sql_top_k(
    conn: Any,
    index_name: str,
    postings_partition: str,
    chunks_partition: str,
    terms: list[str],
    params: Bm25Params,
    k: int,
    *,
    filters: dict[str, Any] | None = None,
) -> list[tuple[str, float]]:
    """Top-k (chunk_id, score) by BM25 from the persisted postings; only chunks matching a term."""
    from psycopg.types.json import Jsonb

    counts = Counter(terms)
    if not counts:
        return []
    with conn.pipeline():  # stats and document frequencies in one round trip
        stats_cursor, df_cursor = queue_statistics(conn, index_name, list(counts))
    stats_row = stats_cursor.fetchone()
    df_rows = df_cursor.fetchall()
    if stats_row is None or int(stats_row[0]) == 0:
        return []
    stats = CorpusStats(int(stats_row[0]), int(stats_row[1]), int(stats_row[2]), float(stats_row[3]))
    weights = {term: counts[term] * stats.idf(int(df), params.epsilon) for term, df in df_rows}
    if not weights:
        return []
    k1, b, avgdl = params.k1, params.b, stats.avgdl
    filter_sql = sql.SQL("")
    args: dict[str, Any] = {
        "terms": list(weights),
        "weights": list(weights.values()),
        "k1": k1,
        "k1p1": k1 + 1,
        "b": b,
        "avgdl": avgdl,
        "k": k,
        "index": index_name,
    }
    if filters:
        filter_sql = sql.SQL(
            " JOIN {} c ON c.index_name = %(index)s AND c.chunk_id = p.chunk_id AND c.metadata @> %(filters)s"
        ).format(sql.Identifier(chunks_partition))
        args["filters"] = Jsonb(filters)
    query = sql.SQL(
        "SELECT p.chunk_id,"
        " sum(w.weight * (p.tf * %(k1p1)s / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.doc_len / %(avgdl)s))))"
        " AS score"
        " FROM unnest(%(terms)s::text[], %(weights)s::float8[]) AS w(term, weight)"
        " JOIN {} p ON p.index_name = %(index)s AND p.term = w.term{}"
        " GROUP BY p.chunk_id ORDER BY score DESC, p.chunk_id LIMIT %(k)s"
    ).format(sql.Identifier(postings_partition), filter_sql)
    return [(r[0], float(r[1])) for r in conn.execute(query, args).fetchall()]


_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def binary_copy_int4_rows(data: bytes, n_fields: int) -> np.ndarray:
    """Parse Postgres binary COPY output whose rows are `n_fields` non-null int4 columns."""
    if not data.startswith(_COPY_SIGNATURE):
        raise ValueError("not a Postgres binary COPY stream")
    extension = int.from_bytes(data[15:19], "big")
    body = data[19 + extension : len(data) - 2]  # header, then rows, then the -1 trailer
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for i in range(n_fields):
        fields += [(f"len{i}", ">i4"), (f"v{i}", ">i4")]
    records = np.frombuffer(body, dtype=np.dtype(fields))
    if records.size and (np.any(records["count"] != n_fields) or np.any(records["len0"] != 4)):
        raise ValueError("unexpected row layout in binary COPY stream")
    return records


class MemoryBm25:
    """An in-memory copy of one index's BM25 postings: a (chunks x terms) scipy CSC matrix.

    Loaded from Postgres in one pass; `version` is the index version it reflects, so a caller
    can reload when the published version moves on. Scores equal `sql_top_k` and rank-bm25.
    """

    def __init__(
        self,
        chunk_ids: list[str],
        term_ids: dict[str, int],
        matrix: Any,
        df: np.ndarray,
        stats: CorpusStats,
        params: Bm25Params,
        version: int,
    ) -> None:
        self.chunk_ids = chunk_ids
        self.term_ids = term_ids
        self.matrix = matrix  # tf-saturation part per (chunk, term), without idf
        self.df = df
        self.stats = stats
        self.params = params
        self.version = version

    @classmethod
    def load(cls, conn: Any, index_name: str, params: Bm25Params) -> MemoryBm25:
        from scipy import sparse

        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(READ_LOCK)  # before the snapshot (see READ_LOCK)
            row = conn.execute(
                "SELECT partition, version FROM indexes WHERE name = %s", (index_name,)
            ).fetchone()
            if row is None:
                raise KeyError(f"unknown index {index_name!r}")
            from chunkyard.retrieval.store.indexes import partition_names

            parts = partition_names(index_name)
            version = int(row[1])
            stats = load_stats(conn, index_name) or CorpusStats(0, 0, 0, 0.0)
            chunk_ids = [
                r[0]
                for r in conn.execute(
                    sql.SQL("SELECT chunk_id FROM {} ORDER BY chunk_id").format(
                        sql.Identifier(parts["chunks"])
                    )
                )
            ]
            terms = conn.execute(
                "SELECT term, df FROM bm25_terms WHERE index_name = %s ORDER BY term", (index_name,)
            ).fetchall()
            term_ids = {t: i for i, (t, _) in enumerate(terms)}
            df = np.array([d for _, d in terms], dtype=np.int64)
            # Postings as (term ordinal, chunk ordinal, tf, length): binary COPY of four int4 columns,
            # parsed by numpy as fixed-size records, so millions of postings load without a Python
            # object each.
            query = sql.SQL(
                "COPY (SELECT t.ti::int4, c.ci::int4, p.tf, p.doc_len FROM {postings} p"
                " JOIN (SELECT chunk_id, row_number() OVER (ORDER BY chunk_id) - 1 AS ci FROM {chunks}) c"
                " ON c.chunk_id = p.chunk_id"
                " JOIN (SELECT term, row_number() OVER (ORDER BY term) - 1 AS ti FROM bm25_terms"
                " WHERE index_name = {name}) t ON t.term = p.term) TO STDOUT (FORMAT BINARY)"
            ).format(
                postings=sql.Identifier(parts["postings"]),
                chunks=sql.Identifier(parts["chunks"]),
                name=sql.Literal(index_name),
            )
            buffer = bytearray()
            with conn.cursor() as cur, cur.copy(query) as copy:
                for block in copy:
                    buffer += block
        records = binary_copy_int4_rows(bytes(buffer), 4)
        cols_idx, rows_idx, tfs, lens = (records[f"v{i}"].astype(np.int64) for i in range(4))
        tf_arr = tfs.astype(np.float64)
        len_arr = lens.astype(np.float64)
        avgdl = stats.avgdl or 1.0
        saturation = (
            tf_arr * (params.k1 + 1) / (tf_arr + params.k1 * (1 - params.b + params.b * len_arr / avgdl))
        )
        matrix = sparse.csc_matrix(
            (saturation, (rows_idx, cols_idx)),
            shape=(len(chunk_ids), len(term_ids)),
        )
        return cls(chunk_ids, term_ids, matrix, df, stats, params, version)

    def idf(self, term_index: int) -> float:
        return self.stats.idf(int(self.df[term_index]), self.params.epsilon)

    def scores(self, terms: list[str]) -> np.ndarray:
        """Scores of every chunk (in `chunk_ids` order), as rank-bm25's `get_scores`."""
        score = np.zeros(len(self.chunk_ids), dtype=np.float64)
        for term in terms:  # repeats count again, as in rank-bm25
            j = self.term_ids.get(term)
            if j is None:
                continue
            start, end = self.matrix.indptr[j], self.matrix.indptr[j + 1]
            score[self.matrix.indices[start:end]] += self.idf(j) * self.matrix.data[start:end]
        return score

    def top_k(self, terms: list[str], k: int) -> list[tuple[str, float]]:
        """Top-k (chunk_id, score) among chunks matching at least one term."""
        score = self.scores(terms)
        matched = np.zeros(len(score), dtype=bool)
        for term in set(terms):
            j = self.term_ids.get(term)
            if j is not None:
                matched[self.matrix.indices[self.matrix.indptr[j] : self.matrix.indptr[j + 1]]] = True
        candidates = np.flatnonzero(matched)
        if candidates.size == 0:
            return []
        if candidates.size > k:
            part = np.argpartition(-score[candidates], k - 1)[:k]
            candidates = candidates[part]
        order = sorted(candidates.tolist(), key=lambda i: (-score[i], self.chunk_ids[i]))
        return [(self.chunk_ids[i], float(score[i])) for i in order[:k]]


# What context scoring reads from an index's published BM25 postings and terms, in the caller's transaction.
def terms_with_df(conn: psycopg.Connection, index_name: str) -> list[tuple[str, int]]:
    """Every term of the index with its document frequency, by term (a term's id is its position)."""
    return conn.execute(
        "SELECT term, df FROM bm25_terms WHERE index_name = %s ORDER BY term", (index_name,)
    ).fetchall()


def postings_by_position(
    conn: psycopg.Connection, index_name: str, postings_partition: str, chunks_partition: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every posting as (term id, chunk's layout position, tf), int64 arrays in no order (one binary COPY).

    Term ids are positions in `terms_with_df`; layout positions follow `LAYOUT_ORDER`.
    """
    query = sql.SQL(
        "COPY (SELECT t.ti::int4, c.ci::int4, p.tf FROM {postings} p"
        " JOIN (SELECT chunk_id, row_number() OVER ({order}) - 1 AS ci FROM {chunks}) c"
        " ON c.chunk_id = p.chunk_id"
        " JOIN (SELECT term, row_number() OVER (ORDER BY term) - 1 AS ti FROM bm25_terms"
        " WHERE index_name = {name}) t ON t.term = p.term) TO STDOUT (FORMAT BINARY)"
    ).format(
        postings=sql.Identifier(postings_partition),
        chunks=sql.Identifier(chunks_partition),
        order=LAYOUT_ORDER,
        name=sql.Literal(str(index_name)),
    )
    records = binary_copy_int4_rows(copy_bytes(conn, query), 3)
    term_index, rows, tf = (records[f"v{i}"].astype(np.int64) for i in range(3))
    return term_index, rows, tf


def queue_term_frequencies(
    conn: psycopg.Connection,
    index_name: str,
    postings_partition: str,
    terms: list[str],
    chunk_ids: list[str],
) -> psycopg.Cursor[Any]:
    """Cursor of (chunk_id, term, tf) for the `terms` in the chunks `chunk_ids`."""
    return conn.execute(
        sql.SQL(
            "SELECT chunk_id, term, tf FROM {} WHERE index_name = %s AND term = ANY(%s) AND chunk_id = ANY(%s)"
        ).format(sql.Identifier(postings_partition)),
        (index_name, terms, chunk_ids),
    )


def bm25_sizes(conn: psycopg.Connection, index_name: str) -> tuple[int, int] | None:
    """(chunks, total BM25 length) of the published index from its BM25 statistics (None: none yet),
    kept up to date by each publish."""
    row = conn.execute(
        "SELECT n_docs, total_length FROM bm25_stats WHERE index_name = %s", (index_name,)
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def published_bm25(conn: psycopg.Connection, index_name: str) -> dict[str, Any] | None:
    """The published index's `bm25` settings (its resolved analyzers included), None before its first publish."""
    row = conn.execute(
        "SELECT config->'bm25' FROM indexes WHERE name = %s AND version > 0", (index_name,)
    ).fetchone()
    return None if row is None else dict(row[0] or {})
