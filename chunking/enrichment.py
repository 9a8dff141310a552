"""Index-time context enrichment, composable with any strategy (`context:` in a `chunker:` mapping).

Only `embed_text` changes; spans never do.

- `headers: true`   document title and heading path prepended (contextual chunk headers)
- `neighbours: N`   the chunk embedded together with N neighbouring chunks on each side
- `llm: true`       an LLM-written sentence situating the chunk in its document
                    (Anthropic's "contextual retrieval"), through `chunking.LLMClient`
"""

from __future__ import annotations

from typing import Any

from chunkyard.chunking.base import ChunkerConfigError, ContextStep
from chunkyard.chunking.types import Chunk, Document

CONTEXT_FIELDS = ("headers", "neighbours", "llm", "llm_max_doc_chars")

CONTEXT_PROMPT = (
    "<document>\n{document}\n</document>\n"
    "Here is the chunk we want to situate within the whole document\n"
    "<chunk>\n{chunk}\n</chunk>\n"
    "Please give a short succinct context to situate this chunk within the overall document "
    "for the purposes of improving search retrieval of the chunk. "
    "Answer only with the succinct context and nothing else."
)


def headers_step(doc: Document, chunks: list[Chunk]) -> None:
    """Prepend `title > heading > subheading` to each chunk's embed_text."""
    for c in chunks:
        parts = [doc.title] if doc.title else []
        parts.extend(h for h in c.metadata.get("heading_path", []) if h)
        if parts:
            c.embed_text = " > ".join(parts) + "\n\n" + (c.embed_text or c.text)
            c.metadata["context"] = [*c.metadata.get("context", []), "headers"]


def make_neighbours_step(n: int) -> ContextStep:
    def neighbours_step(doc: Document, chunks: list[Chunk]) -> None:
        """embed_text = the document slice from the n-th previous to the n-th next chunk."""
        originals = [c.embed_text for c in chunks]
        for i, c in enumerate(chunks):
            lo = chunks[max(0, i - n)]
            hi = chunks[min(len(chunks) - 1, i + n)]
            start, end = min(lo.start, c.start), max(hi.end, c.end)
            prefix = originals[i][: len(originals[i]) - len(c.text)] if originals[i].endswith(c.text) else ""
            c.embed_text = prefix + doc.text[start:end]
            c.metadata["context"] = [*c.metadata.get("context", []), f"neighbours:{n}"]

    return neighbours_step


def make_llm_step(llm: Any, max_doc_chars: int) -> ContextStep:
    def llm_context_step(doc: Document, chunks: list[Chunk]) -> None:
        """Ask the LLM for a short situating context per chunk and prepend it."""
        document = doc.text[:max_doc_chars]
        for c in chunks:
            answer = llm.complete(CONTEXT_PROMPT.format(document=document, chunk=c.text)).strip()
            if answer:
                c.embed_text = answer + "\n\n" + (c.embed_text or c.text)
                c.metadata["llm_context"] = answer
                c.metadata["context"] = [*c.metadata.get("context", []), "llm"]

    return llm_context_step


def build_context_steps(context: Any, *, llm: Any = None) -> list[ContextStep]:
    """Validate the `context:` mapping and return the enrichment steps in a fixed order."""
    if context in (None, False, {}):
        return []
    if not isinstance(context, dict):
        raise ChunkerConfigError(
            f"chunker.context: expected a mapping like {{headers: true}}, got {context!r}"
        )
    unknown = sorted(set(context) - set(CONTEXT_FIELDS))
    if unknown:
        raise ChunkerConfigError(
            f"chunker.context.{unknown[0]}: unknown; expected one of {', '.join(CONTEXT_FIELDS)}"
        )
    steps: list[ContextStep] = []
    neighbours = context.get("neighbours", 0)
    if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 0:
        raise ChunkerConfigError(f"chunker.context.neighbours: expected an integer >= 0, got {neighbours!r}")
    if neighbours:
        steps.append(make_neighbours_step(neighbours))
    headers = context.get("headers", False)
    if not isinstance(headers, bool):
        raise ChunkerConfigError(f"chunker.context.headers: expected true or false, got {headers!r}")
    if headers:
        steps.append(headers_step)
    use_llm = context.get("llm", False)
    if not isinstance(use_llm, bool):
        raise ChunkerConfigError(f"chunker.context.llm: expected true or false, got {use_llm!r}")
    max_chars = context.get("llm_max_doc_chars", 20000)
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 100:
        raise ChunkerConfigError(
            f"chunker.context.llm_max_doc_chars: expected an integer >= 100, got {max_chars!r}"
        )
    if use_llm:
        if llm is None:
            raise ChunkerConfigError(
                "chunker.context.llm: needs an LLM endpoint (chunker.endpoint: {base_url, model}) or llm=OpenAICompatibleClient(...)"
            )
        steps.append(make_llm_step(llm, max_chars))
    return steps
