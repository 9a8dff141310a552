"""A collection's source documents: synced from its folder, read back, and read against an index."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from chunkyard.chunking.types import Document
from chunkyard.retrieval.settings.names import IndexName
from chunkyard.retrieval.store.indexes import partition_names
from chunkyard.retrieval.store.pool import Pool
from psycopg import sql
from psycopg.types.json import Jsonb


# A collection's source documents: synced from its folder, read back by id, with load failures.
class StaleSignatures(RuntimeError):
    """Documents left unread as unchanged were deleted meanwhile: the folder must be read in full."""


@dataclass
class DocumentSync:
    """What `Documents.sync` changed, by document id."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[Any] = field(default_factory=list)

    def as_metadata(self) -> dict[str, int]:
        return {
            "documents_added": len(self.added),
            "documents_changed": len(self.changed),
            "documents_deleted": len(self.deleted),
            "documents_unchanged": len(self.unchanged),
            "documents_failed": len(self.failed),
        }


class Documents:
    """The `documents` and `document_failures` tables, one collection at a time."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def sync(
        self,
        collection: str,
        documents: Sequence[Document],
        failures: Sequence[Any] = (),
        *,
        unchanged: Sequence[str] = (),
        signatures: Mapping[str, str] | None = None,
    ) -> DocumentSync:
        """Make the stored collection equal `documents` plus `unchanged`: upsert added/changed, delete
        absent ones.

        A document that failed to load this time (its id or folder in `failures`) keeps its previous
        stored version instead of being deleted: a transient read error must not drop it.
        `unchanged` are ids left unread because their file signature matched (`signatures`);
        `signatures` ({id: file signature}) is recorded for the documents given, None where absent.
        An unchanged id that is no longer stored raises `StaleSignatures`: read the files again.
        """
        ids = [d.id for d in documents]
        if len(set(ids)) != len(ids):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"documents.sync: duplicate document id(s) {dupes[:5]}")
        failed_paths = [str(f.path).rstrip("/") for f in failures]
        report = DocumentSync(failed=list(failures))
        with self._pool.connection() as conn, conn.transaction():
            # one sync of a collection at a time; an advisory lock, as row locks on every document
            # would write each row's xmax (a one-document update then dirties the whole collection)
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('chunkyard.documents:' || %s))", (collection,)
            )
            existing = {
                doc_id: (sha, signature)
                for doc_id, sha, signature in conn.execute(
                    "SELECT doc_id, sha256, file_signature FROM documents WHERE collection = %s",
                    (collection,),
                ).fetchall()
            }
            gone = [doc_id for doc_id in unchanged if doc_id not in existing]
            if gone:
                raise StaleSignatures(f"documents.sync: {len(gone)} unread document(s) are no longer stored")
            report.unchanged.extend(unchanged)
            upserts, resigned = [], []
            for doc in documents:
                sha = doc.sha256
                signature = signatures.get(doc.id) if signatures is not None else None
                if doc.id not in existing:
                    report.added.append(doc.id)
                elif existing[doc.id][0] != sha:
                    report.changed.append(doc.id)
                else:
                    report.unchanged.append(doc.id)
                    if signatures is not None and existing[doc.id][1] != signature:
                        resigned.append((signature, collection, doc.id))
                    continue
                upserts.append(
                    (
                        collection,
                        doc.id,
                        str(doc.metadata.get("path", doc.id)),
                        sha,
                        doc.text,
                        doc.mime_type,
                        doc.title,
                        Jsonb(doc.metadata),
                        signature,
                    )
                )
            given = set(ids).union(unchanged)

            def kept_by_failure(doc_id: str) -> bool:
                return any(doc_id == p or doc_id.startswith(p + "/") for p in failed_paths)

            report.deleted = sorted(d for d in existing if d not in given and not kept_by_failure(d))
            with conn.cursor() as cur:
                if upserts:
                    cur.executemany(
                        "INSERT INTO documents (collection, doc_id, path, sha256, text, mime_type, title,"
                        " metadata, file_signature) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                        " ON CONFLICT (collection, doc_id) DO UPDATE SET path = excluded.path,"
                        " sha256 = excluded.sha256, text = excluded.text, mime_type = excluded.mime_type,"
                        " title = excluded.title, metadata = excluded.metadata,"
                        " file_signature = excluded.file_signature, updated_at = now()",
                        upserts,
                    )
                if resigned:
                    cur.executemany(
                        "UPDATE documents SET file_signature = %s WHERE collection = %s AND doc_id = %s",
                        resigned,
                    )
            if report.deleted:
                conn.execute(
                    "DELETE FROM documents WHERE collection = %s AND doc_id = ANY(%s)",
                    (collection, report.deleted),
                )
            conn.execute("DELETE FROM document_failures WHERE collection = %s", (collection,))
            if failures:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO document_failures (collection, path, reason) VALUES (%s, %s, %s)"
                        " ON CONFLICT (collection, path) DO UPDATE SET reason = excluded.reason,"
                        " recorded_at = now()",
                        [(collection, str(f.path), str(f.reason)) for f in failures],
                    )
        return report

    def read(self, collection: str, doc_ids: Iterable[str] | None = None) -> list[Document]:
        query = "SELECT doc_id, text, mime_type, title, metadata FROM documents WHERE collection = %s"
        params: list[Any] = [collection]
        if doc_ids is not None:
            query += " AND doc_id = ANY(%s)"
            params.append(list(doc_ids))
        with self._pool.connection() as conn:
            rows = conn.execute(query + " ORDER BY doc_id", params).fetchall()
        return [Document(id=r[0], text=r[1], mime_type=r[2], title=r[3], metadata=r[4] or {}) for r in rows]

    def signatures(self, collection: str) -> dict[str, str]:
        """{document id: file signature} of the stored documents that have one (see `sync`)."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT doc_id, file_signature FROM documents WHERE collection = %s AND file_signature IS NOT NULL",
                (collection,),
            ).fetchall()
        return dict(rows)

    def hashes(self, collection: str) -> dict[str, str]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT doc_id, sha256 FROM documents WHERE collection = %s", (collection,)
            ).fetchall()
        return dict(rows)

    def failures(self, collection: str) -> list[dict[str, str]]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT path, reason FROM document_failures WHERE collection = %s ORDER BY path",
                (collection,),
            ).fetchall()
        return [{"path": p, "reason": r} for p, r in rows]


# A collection's stored documents read against an index: text slices, what the index lags behind.
def document_slice(
    conn: psycopg.Connection, collection: str, doc_id: str, start: int, end: int
) -> str | None:
    """The stored document's text[start:end]; None when the document is not stored."""
    row = conn.execute(
        "SELECT substr(text, %s, %s) FROM documents WHERE collection = %s AND doc_id = %s",
        (start + 1, end - start, collection, doc_id),
    ).fetchone()
    return None if row is None else row[0]


def unindexed_changes(
    conn: psycopg.Connection, index_name: str, collection: str
) -> list[tuple[str, bool, datetime]]:
    """Stored documents the index lacks or holds another version of, by id: (doc_id, missing from the
    index, the document's `updated_at`)."""
    return conn.execute(
        "SELECT d.doc_id, i.doc_id IS NULL, d.updated_at FROM documents d"
        " LEFT JOIN index_documents i ON i.index_name = %s AND i.doc_id = d.doc_id"
        " WHERE d.collection = %s AND (i.doc_id IS NULL OR i.sha256 <> d.sha256) ORDER BY d.doc_id",
        (index_name, collection),
    ).fetchall()


def deleted_since_indexed(conn: psycopg.Connection, index_name: str, collection: str) -> list[str]:
    """Documents the index still holds that are no longer stored, by id."""
    rows = conn.execute(
        "SELECT i.doc_id FROM index_documents i WHERE i.index_name = %s AND NOT EXISTS"
        " (SELECT 1 FROM documents d WHERE d.collection = %s AND d.doc_id = i.doc_id)"
        " ORDER BY i.doc_id",
        (index_name, collection),
    ).fetchall()
    return [doc_id for (doc_id,) in rows]


# A document's chunks in an index, published or staged, in document order: where it was cut.
@dataclass(frozen=True)
class DocumentChunk:
    """A published chunk: its exact span of the document, its text and metadata (pages, slides, headings)."""

    chunk_id: str
    start: int
    end: int
    text: str
    metadata: dict[str, Any]


def published_version(pool: Pool, index: IndexName) -> int | None:
    """The index's published version; None when it does not exist or was never published."""
    with pool.connection() as conn:
        try:
            row = conn.execute("SELECT version FROM indexes WHERE name = %s", (str(index),)).fetchone()
        except psycopg.errors.UndefinedTable:  # a database no index was built in: no tables yet
            return None
    return int(row[0]) if row and row[0] else None


def document_chunks(pool: Pool, index: IndexName, doc_id: str) -> list[DocumentChunk]:
    """`doc_id`'s chunks in `index` as published, by start offset (empty: not in the index)."""
    table = sql.Identifier(partition_names(str(index))["chunks"])
    query = sql.SQL(
        'SELECT chunk_id, start, "end", text, metadata FROM {} WHERE index_name = %s AND doc_id = %s'
        ' ORDER BY start, "end"'
    ).format(table)
    with pool.connection() as conn:
        rows = conn.execute(query, (str(index), doc_id)).fetchall()
    return [DocumentChunk(r[0], int(r[1]), int(r[2]), r[3], dict(r[4] or {})) for r in rows]


def document_ids(pool: Pool, index: IndexName) -> list[str]:
    """Every document id with a chunk in `index`, sorted (to suggest the one a user meant)."""
    table = sql.Identifier(partition_names(str(index))["chunks"])
    query = sql.SQL("SELECT DISTINCT doc_id FROM {} WHERE index_name = %s ORDER BY doc_id").format(table)
    with pool.connection() as conn:
        return [r[0] for r in conn.execute(query, (str(index),)).fetchall()]


def document_hashes(conn: psycopg.Connection, collection: str) -> dict[str, str]:
    """doc_id -> sha256 of every document in the collection now."""
    rows = conn.execute(
        "SELECT doc_id, sha256 FROM documents WHERE collection = %s", (collection,)
    ).fetchall()
    return dict(rows)


def built_hashes(conn: psycopg.Connection, index_name: str) -> dict[str, str]:
    """doc_id -> sha256 of every document the published index was built from."""
    rows = conn.execute(
        "SELECT doc_id, sha256 FROM index_documents WHERE index_name = %s", (index_name,)
    ).fetchall()
    return dict(rows)


def count_chunks_of(conn: psycopg.Connection, partition: str, index_name: str, doc_ids: Sequence[str]) -> int:
    """The index's published chunks of `doc_ids` (by the doc_id index, not a scan of the partition)."""
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE index_name = %s AND doc_id = ANY(%s)").format(
            sql.Identifier(partition)
        ),
        (index_name, list(doc_ids)),
    ).fetchone()
    return int(row[0])


@dataclass(frozen=True)
class StagingDelta:
    """What stage_chunks stages: the collection's documents now against those the published index was
    built from (every built one replaced on a full rebuild), by document id, each list sorted."""

    added: list[str]
    changed: list[str]
    deleted: list[str]
    unchanged: list[str]
    removals: list[str]  # the built documents whose chunks the run replaces (changed and deleted ones)
    chunks_to_delete: int  # the index's published chunks of `removals`


def staging_delta(
    conn: psycopg.Connection, collection: str, index_name: str, partition: str, full_rebuild: bool
) -> StagingDelta:
    """The documents stage_chunks stages and removes, and the published chunks it replaces, read at once
    on the caller's transaction (`partition`: the index's chunks partition)."""
    current = document_hashes(conn, collection)
    built = built_hashes(conn, index_name)
    previous = {} if full_rebuild else built
    unchanged = sorted(d for d in current if d in previous and previous[d] == current[d])
    removals = sorted(set(built) - set(unchanged))
    # counted over the removed documents only (the doc_id index), not the whole partition: the
    # published chunk count (BM25's N, checked against the partition at every publish) gives the rest
    return StagingDelta(
        added=sorted(d for d in current if d not in previous),
        changed=sorted(d for d in current if d in previous and previous[d] != current[d]),
        deleted=sorted(d for d in built if d not in current),
        unchanged=unchanged,
        removals=removals,
        chunks_to_delete=count_chunks_of(conn, partition, index_name, removals) if removals else 0,
    )
