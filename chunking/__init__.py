"""chunkyard's chunking library: every strategy, exact spans, sizes in the chosen tokenizer.

from chunkyard.chunking import build_chunker
chunker = build_chunker({"strategy": "recursive", "size": 256, "tokenizer": "cl100k"})
chunks = chunker.chunk(document)   # chunk.text == document.text[chunk.start:chunk.end]
"""

from __future__ import annotations

from chunkyard.chunking.base import ChunkerConfigError
from chunkyard.chunking.protocols import EmbeddingModel, LLMClient
from chunkyard.chunking.registry import STRATEGIES, build_chunker
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.chunking.types import Chunk, Chunker, Document

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
