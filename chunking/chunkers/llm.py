"""`llm`: an LLM chooses the boundaries between numbered sentences. Off unless a config names it."""

from __future__ import annotations

import re
from typing import Any

from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.fields import require_int
from chunkyard.chunking.sentences import pack_spans, sentence_spans
from chunkyard.chunking.spans import DocText, Piece, extend_overlap

SYSTEM_PROMPT = (
    "You split documents into topically coherent sections for a search index. "
    "You answer only with sentence numbers."
)
BOUNDARY_PROMPT = (
    "Below are numbered sentences of a document. Decide where a new topic or section "
    "starts. Answer with the numbers of the sentences that START a new section, "
    "comma-separated (for example: 4, 9, 15). Answer 'none' if there is no new section.\n\n{sentences}"
)
_NUMBER = re.compile(r"\d+")


class LLMChunker(BaseChunker):
    """Sentences numbered and shown to the LLM in windows of `max_sentences`; the
    sentences it names start new chunks. Sections over the size are re-packed by
    sentences, so the limit holds whatever the LLM says."""

    strategy = "llm"

    def __init__(self, *, llm: Any, max_sentences: int = 60, **kw: Any) -> None:
        super().__init__(**kw)
        self.llm = llm
        self.max_sentences = max_sentences

    def pieces(self, dt: DocText) -> list[Piece]:
        text = dt.text
        sentences = [
            w for s in sentence_spans(text) for w in pack_spans(dt.units, [s], self.base_budget, text)
        ]
        if not sentences:
            return []
        starts = {0}
        for w0 in range(0, len(sentences), self.max_sentences):
            window = sentences[w0 : w0 + self.max_sentences]
            listing = "\n".join(f"[{w0 + k}] {text[s:e]}" for k, (s, e) in enumerate(window))
            answer = self.llm.complete(BOUNDARY_PROMPT.format(sentences=listing), system=SYSTEM_PROMPT)
            for m in _NUMBER.finditer(answer):
                k = int(m.group())
                if w0 < k < w0 + len(window):
                    starts.add(k)
        bounds = [*sorted(starts), len(sentences)]
        out: list[Piece] = []
        for gi, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            for s, e in pack_spans(dt.units, sentences[a:b], self.base_budget, text):
                out.append(Piece(s, e, {"llm_section": gi}))
        return extend_overlap(out, dt.units, self.overlap, len(text), text)


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    if llm is None:
        raise ChunkerConfigError(
            "chunker.endpoint: strategy 'llm' needs an LLM endpoint ({base_url, model}) or llm=OpenAICompatibleClient(...)"
        )
    max_sentences = require_int(options, "max_sentences", 60, minimum=2)
    return LLMChunker(llm=llm, max_sentences=max_sentences, **common)
