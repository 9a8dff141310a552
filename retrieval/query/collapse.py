"""Collapse stage: identical chunk texts (repeated passages) take one result slot (`collapse_duplicates`)."""

from __future__ import annotations

from chunkyard.retrieval.query.context import ChunkLayout
from chunkyard.retrieval.query.fusion import Ranked


def collapse_identical_texts(ranked: Ranked, layout: ChunkLayout, limit: int | None = None) -> Ranked:
    """One result per chunk text: repeated passages (reports, boilerplate) take one slot, not several.

    The copy returned is the earliest in the best-ranked copy's document (a document's first
    occurrence is its canonical one), at the best copy's rank and with its scores. `limit`: stop
    after that many results (the caller reads no further), instead of walking every candidate.
    """
    seen: set[int] = set()
    out: Ranked = []
    for cid, scores in ranked:
        if limit is not None and len(out) >= limit:
            break
        if cid not in layout.position:
            out.append((cid, scores))
            continue
        key = layout.text_key(cid)
        if key in seen:
            continue
        seen.add(key)
        first = layout.earliest_copy(cid)
        out.append((first, scores if first == cid else {**scores, "collapsed": 1.0}))
    return out
