"""Rows stage: fetch the ranked chunks' rows (ending the read transaction) and attach parent spans."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from chunkyard.retrieval.query.fusion import Ranked
from chunkyard.retrieval.query.handles import IndexHandle
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.store import Store, documents, published_chunks
from chunkyard.retrieval.store.published_chunks import end_read
from chunkyard.retrieval.store.vectors import as_array


@dataclass
class ChunkRow:
    doc_id: str
    start: int
    end: int
    text: str
    metadata: dict[str, Any]
    parent_id: str | None
    embedding: np.ndarray | None = None
    stale: str | None = None


def fetch_rows(
    conn: psycopg.Connection,
    handle: IndexHandle,
    chunk_ids: list[str],
    *,
    with_vectors: bool = False,
    commit: bool = False,
) -> dict[str, ChunkRow]:
    """Chunk rows by id; with `commit`, the read transaction's COMMIT rides in the same round trip."""
    if not chunk_ids:
        if commit:
            end_read(conn)
        return {}
    with conn.pipeline():
        cursor = published_chunks.queue_rows(
            conn, handle.name, handle.chunks, chunk_ids, with_vectors=with_vectors
        )
        failures = published_chunks.queue_stale_documents(
            conn, handle.name, handle.chunks, chunk_ids, handle.name.collection
        )
        if commit:
            end_read(conn)
    rows = cursor.fetchall()
    stale = dict(failures.fetchall())
    return {
        row[0]: ChunkRow(
            doc_id=row[1],
            start=row[2],
            end=row[3],
            text=row[4],
            metadata=row[5] or {},
            parent_id=row[6],
            embedding=as_array(row[7]) if with_vectors else None,
            stale=stale.get(row[1]),
        )
        for row in rows
    }


def to_results(handle: IndexHandle, hits: Ranked, rows: dict[str, ChunkRow]) -> list[SearchResult]:
    return [
        SearchResult(
            chunk_id=cid,
            doc_id=rows[cid].doc_id,
            start=rows[cid].start,
            end=rows[cid].end,
            text=rows[cid].text,
            metadata=rows[cid].metadata,
            scores=scores,
            rank=rank,
            index=handle.label,
            index_version=handle.version,
            stale=rows[cid].stale,
        )
        for rank, (cid, scores) in enumerate(hits, start=1)
    ]


def attach_parents(
    store: Store, handle: IndexHandle, results: list[SearchResult], rows: dict[str, ChunkRow]
) -> None:
    """Parent spans of hierarchical chunks: a stored parent chunk, or `parent_start/end` in metadata."""
    parent_ids = {rows[r.chunk_id].parent_id for r in results if rows[r.chunk_id].parent_id}
    with store.connection() as conn:
        parents = fetch_rows(conn, handle, sorted(parent_ids)) if parent_ids else {}
        for result in results:
            parent_id = rows[result.chunk_id].parent_id
            if parent_id and parent_id in parents:
                p = parents[parent_id]
                result.parent = {
                    "chunk_id": parent_id,
                    "doc_id": p.doc_id,
                    "start": p.start,
                    "end": p.end,
                    "text": p.text,
                }
                continue
            meta = result.metadata
            start, end = meta.get("parent_start"), meta.get("parent_end")
            if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end:
                text = documents.document_slice(conn, handle.name.collection, result.doc_id, start, end)
                if text is not None:
                    result.parent = {
                        "chunk_id": parent_id,
                        "doc_id": result.doc_id,
                        "start": start,
                        "end": end,
                        "text": text,
                    }
