"""`chunkyard chunks DOC`: one document's chunks in an index, with their spans, pages and where each was cut."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from chunkyard.chunking.locations import location_parts

EDGE_CHARS = 40  # characters shown at each end of a chunk: where it starts and where it was cut


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    chunks = sub.add_parser(
        "chunks",
        help="a document's chunks in an index: spans, pages and where each was cut",
        parents=[common],
    )
    chunks.add_argument("doc", metavar="DOC", help="the document: its path inside the collection's folder")
    chunks.add_argument(
        "--index", default=None, help="collection/config (default: the project's default index)"
    )
    chunks.add_argument("--full", action="store_true", help="print each chunk's whole text")


def cmd_chunks(args: argparse.Namespace) -> int:
    from chunkyard.orchestration.cli_errors import UsageError
    from chunkyard.retrieval.query.results import NOTHING_INDEXED
    from chunkyard.retrieval.settings.config import default_collection
    from chunkyard.retrieval.settings.default_index import default_index
    from chunkyard.retrieval.settings.names import IndexName
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import database_url
    from chunkyard.retrieval.store.documents import document_chunks, document_ids, published_version

    index = default_index() if args.index is None else IndexName.parse(args.index, default_collection())
    store = Store(database_url())
    try:
        if published_version(store, index) is None:
            known = [info["name"] for info in store.indexes.list() if info.get("version")]
            raise UsageError(
                f"index {str(index)!r} is not published; "
                + (f"known: {', '.join(known)}" if known else NOTHING_INDEXED)
            )
        found = document_chunks(store, index, args.doc)
        if not found:
            ids = document_ids(store, index)
            near = difflib.get_close_matches(args.doc, ids, n=3, cutoff=0.4)
            hint = f"; did you mean {', '.join(near)}?" if near else f" ({len(ids)} documents in it)"
            raise UsageError(f"{args.doc}: no chunk of this document in {index}{hint}")
    finally:
        store.close()
    covered = sum(chunk.end - chunk.start for chunk in found)
    print(f"{index}: {args.doc}, {len(found)} chunk{'s' if len(found) != 1 else ''} ({covered} characters)")
    previous_end = None
    for number, chunk in enumerate(found, 1):
        gap = ""
        if previous_end is not None and chunk.start != previous_end:
            gap = (
                f", overlap {previous_end - chunk.start}"
                if chunk.start < previous_end
                else f", gap {chunk.start - previous_end}"
            )
        print(
            f"{number}. [{chunk.start}:{chunk.end}] {chunk.end - chunk.start} characters{where(chunk.metadata)}{gap}"
        )
        text = " ".join(chunk.text.split())
        if args.full or len(text) <= 2 * EDGE_CHARS + 5:
            print(f"   {text}")
        else:
            print(f"   {text[:EDGE_CHARS]} ... {text[-EDGE_CHARS:]}")
        previous_end = chunk.end
    return 0


def where(metadata: dict[str, Any]) -> str:
    """`, pages 2-3`, `, slide 4`, `, Setup › Install`: where in its document a chunk is, when known."""
    return "".join(f", {part}" for part in location_parts(metadata))
