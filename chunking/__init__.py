"""chunkyard's chunking library: every strategy, exact spans, sizes in the chosen tokenizer.

from chunking import build_chunker
chunker = build_chunker({"strategy": "recursive", "size": 256, "tokenizer": "cl100k"})
chunks = chunker.chunk(document)   # chunk.text == document.text[chunk.start:chunk.end]
"""

from __future__ import annotations

from chunking.base import ChunkerConfigError
from chunking.protocols import EmbeddingModel, LLMClient
from chunking.registry import STRATEGIES, build_chunker
from chunking.tokenizers import get_tokenizer
from chunking.types import Chunk, Chunker, Document

__all__ = [
    "STRATEGIES",
    "Chunk",
    "Chunker",
    "ChunkerConfigError",
    "Document",
    "EmbeddingModel",
    "LLMClient",
    "build_chunker",
    "get_tokenizer",
]
