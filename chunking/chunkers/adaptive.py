"""`adaptive`: route each document to the strategy that fits its type and content.

Routing (first match wins), recorded in `metadata["routed_to"]`:

1. mime type or file name says HTML, or the text starts like an HTML document -> `html`
2. mime type or file name says code (Python via `ast`, others recursive) -> `code`
3. a chat transcript (`User:`/`Assistant:` style turns, or JSON / Python-repr messages with
   a `role`) -> `chat`:
   turns are packed up to the size and only cut at turn boundaries; a turn longer than
   the size is split by sentences
4. markdown (mime/extension, or ATX headings / code fences in the text) -> `markdown`
5. anything else is prose -> `sentence`
"""

from __future__ import annotations

import re
from typing import Any

from chunkyard.chunking.base import BaseChunker
from chunkyard.chunking.chunkers.code import CodeChunker, detect_language
from chunkyard.chunking.chunkers.html import HtmlChunker
from chunkyard.chunking.chunkers.markdown import MarkdownChunker
from chunkyard.chunking.chunkers.sentence import SentenceChunker
from chunkyard.chunking.sentences import pack_spans, sentence_spans
from chunkyard.chunking.spans import DocText, Piece, extend_overlap, trim_span

_HTML_START = re.compile(r"\s*(?:<!doctype html|<html\b|<body\b|<div\b|<p\b|<h[1-6]\b)", re.IGNORECASE)
_MD_SIGNS = re.compile(r"^(?:#{1,6} \S|```|~~~|\s*[-*+] \S|\|.+\|\s*$)", re.MULTILINE)
# a turn starts at "Speaker:" at line start, or at a JSON chat message object
_TURN = re.compile(
    r"(?:^|(?<=\n))[ \t]*(?:user|assistant|system|human|ai|bot|customer|agent|q|a|speaker \w+|[A-Z][a-zA-Z]{1,20})[ \t]*:[ \t]"
    r"|\{\s*[\"'](?:role|content|from|speaker)[\"']\s*:",
    re.IGNORECASE,
)
_JSON_ROLE = re.compile(r"[\"']role[\"']\s*:\s*[\"'](?:user|assistant|system)[\"']")
_SPEAKER_LINE = re.compile(
    r"^[ \t]*(?:user|assistant|human|ai|system|customer|agent)[ \t]*:", re.IGNORECASE | re.MULTILINE
)


def route(doc_text: str, mime_type: str, doc: Any) -> str:
    mime = (mime_type or "").lower()
    name = str(doc.metadata.get("path", "") or doc.id).lower()
    head = doc_text[:2000]
    if "html" in mime or name.endswith((".html", ".htm")) or _HTML_START.match(head):
        return "html"
    if detect_language(doc) is not None and not name.endswith((".md", ".txt")):
        return "code"
    json_roles = sum(1 for _ in _JSON_ROLE.finditer(doc_text[:20000]))
    speaker_lines = sum(1 for _ in _SPEAKER_LINE.finditer(doc_text[:20000]))
    if json_roles >= 2 or speaker_lines >= 2:
        return "chat"
    if "markdown" in mime or name.endswith((".md", ".markdown")):
        return "markdown"
    if sum(1 for _ in _MD_SIGNS.finditer(doc_text[:20000])) >= 2:
        return "markdown"
    return "prose"


class AdaptiveChunker(BaseChunker):
    strategy = "adaptive"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        common = {
            "tokenizer": self.tokenizer,
            "size": self.size,
            "overlap": self.overlap,
            "config_key": self.config_key,
        }
        self._routes = {
            "html": HtmlChunker(**common),
            "code": CodeChunker(**common),
            "markdown": MarkdownChunker(**common),
            "prose": SentenceChunker(**common),
        }

    def pieces(self, dt: DocText) -> list[Piece]:
        target = route(dt.text, dt.doc.mime_type, dt.doc)
        pieces = self._chat_pieces(dt) if target == "chat" else self._routes[target].pieces(dt)
        for p in pieces:
            p.metadata["routed_to"] = target
        return pieces

    def finish(self, dt: DocText, pieces: list[Piece]):
        chunks = super().finish(dt, pieces)
        if chunks and chunks[0].metadata.get("routed_to") == "html":
            from chunkyard.chunking.chunkers.html import strip_tags

            for c in chunks:
                c.embed_text = strip_tags(c.text) or c.text
        return chunks

    def _chat_pieces(self, dt: DocText) -> list[Piece]:
        """Turns packed up to the budget; a cut only ever falls on a turn boundary (or, for
        a single over-long turn, between its sentences)."""
        text = dt.text
        starts = [m.start() for m in _TURN.finditer(text)]
        bounds = sorted({0, *starts, len(text)})
        turns = [trim_span(text, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
        turns = [(a, b) for a, b in turns if b > a]
        spans: list[tuple[int, int]] = []
        for a, b in turns:
            if dt.units.estimate_one(a, b) <= self.base_budget:
                spans.append((a, b))
            else:
                spans.extend(pack_spans(dt.units, sentence_spans(text, a, b), self.base_budget, text))
        packed = pack_spans(dt.units, spans, self.base_budget, text)
        return extend_overlap(
            [Piece(s, e, {"turns": True}) for s, e in packed], dt.units, self.overlap, len(text), text
        )


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    return AdaptiveChunker(**common)
