"""Core value types of the chunking library: documents in, exact spans out."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# Document metadata that locates text in its source: a list of start offsets into `text`, one per
# page (PDF) or slide (PPTX), 0 first. A chunk gets the 1-based numbers of its first and last unit.
LOCATION_KEYS: dict[str, tuple[str, str]] = {
    "page_starts": ("page", "page_end"),
    "slide_starts": ("slide", "slide_end"),
}


# Document metadata with a value per page (the pages read by OCR and their confidence): in a document
# with `page_starts` each chunk gets the values of the pages it covers (`chunking.ocr_spans`) instead.
PAGE_VALUE_KEYS: tuple[str, ...] = ("ocr_pages", "ocr_page_confidence", "ocr_confidence")


def without_locations(metadata: dict[str, Any]) -> dict[str, Any]:
    """A document's metadata minus its location lists and, where it has pages, its per-page values:
    what every one of its chunks may copy."""
    if not any(key in metadata for key in LOCATION_KEYS):
        return metadata
    dropped = {*LOCATION_KEYS, *(PAGE_VALUE_KEYS if "page_starts" in metadata else ())}
    return {k: v for k, v in metadata.items() if k not in dropped}


def sha256_text(text: str) -> str:
    """Content hash used for change detection and the embedding cache."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Document:
    """A source document. `text` is what every chunk span indexes into."""

    id: str
    text: str
    mime_type: str = "text/plain"
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return sha256_text(self.text)


def as_document(document: Document | str, doc_id: str = "doc") -> Document:
    """Accept a plain string wherever a Document is expected."""
    if isinstance(document, Document):
        return document
    if isinstance(document, str):
        return Document(id=doc_id, text=document)
    raise TypeError(f"expected chunking.Document or str, got {type(document).__name__}")


def make_chunk_id(doc_id: str, config_key: str, start: int, end: int) -> str:
    """Stable id from (document, config, span): never a list position."""
    raw = f"{doc_id}\x1f{config_key}\x1f{start}\x1f{end}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]


@dataclass
class Chunk:
    """An exact span of a document: `text == document.text[start:end]` always holds.

    `embed_text` is what gets embedded and BM25-indexed; it equals `text` unless a
    context enricher prepended something (title, heading path, neighbours, LLM context).
    """

    doc_id: str
    start: int
    end: int
    text: str
    token_count: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    embed_text: str | None = None
    config_key: str = ""
    # Precomputed vector (late chunking only); otherwise the indexer embeds `embed_text`.
    embedding: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.embed_text is None:
            self.embed_text = self.text

    @property
    def chunk_id(self) -> str:
        return make_chunk_id(self.doc_id, self.config_key, self.start, self.end)

    @property
    def parent_id(self) -> str | None:
        return self.metadata.get("parent_id")

    @property
    def content_hash(self) -> str:
        """Hash of what is embedded: the key of the embedding cache."""
        return sha256_text(self.embed_text or "")


@runtime_checkable
class Chunker(Protocol):
    """Anything that turns a document into exact-span chunks."""

    def chunk(self, document: Document | str) -> list[Chunk]: ...

    def chunk_batch(self, documents: Iterable[Document | str]) -> list[list[Chunk]]: ...
