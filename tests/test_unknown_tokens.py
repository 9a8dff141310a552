"""Unknown tokens: text a model's vocabulary lacks (Thai under all-MiniLM-L6-v2) counts by its letters."""

from __future__ import annotations

from pathlib import Path

from chunkyard.chunking.registry import build_chunker
from chunkyard.chunking.tokenizers import UNKNOWN_LETTERS, get_tokenizer
from chunkyard.chunking.types import Document

DATA = Path(__file__).parent / "data" / "multilingual"


def _thai() -> str:
    return "\n\n".join(p.read_text(encoding="utf-8") for p in sorted((DATA / "th").glob("*.md")))


def test_an_unknown_run_counts_by_its_letters_and_known_text_as_before() -> None:
    minilm = get_tokenizer("model", "all-MiniLM-L6-v2")
    thai = _thai()
    plain = len(minilm._tok.encode(thai, add_special_tokens=False).ids)  # a few [UNK]s per paragraph
    letters = sum(ch.isalpha() for ch in thai)
    assert minilm.count(thai) >= letters // UNKNOWN_LETTERS > 3 * plain
    assert minilm.count_batch([thai]) == [minilm.count(thai)]  # what within_model_token_limit counts
    assert minilm.units(thai).total + minilm.special_tokens == minilm.count(thai)
    english = (DATA / "en" / "huerto.md").read_text(
        encoding="utf-8"
    ) + " ──►└─────► ；"  # [UNK]s without letters
    assert minilm.count(english) == len(minilm._tok.encode(english).ids)


def test_thai_chunks_under_minilm_hold_what_the_model_reads() -> None:
    """recursive-64 in MiniLM's tokens: each Thai chunk within 64 counted tokens, about 4 letters a token."""
    chunker = build_chunker({"strategy": "recursive", "size": 64, "overlap": 0, "tokenizer": "model"})
    minilm = get_tokenizer("model", "all-MiniLM-L6-v2")
    chunks = chunker.chunk(Document("th.md", _thai() * 3))
    assert len(chunks) > 20
    for chunk in chunks:
        assert minilm.count(chunk.text) <= 64
        assert sum(ch.isalpha() for ch in chunk.text) <= 64 * UNKNOWN_LETTERS
    # multilingual-e5-small reads Thai: its own tokens, no fallback
    e5 = get_tokenizer("model", "multilingual-e5-small")
    assert e5.unknown_id not in e5._tok.encode(_thai()).ids
