"""Property tests over random unicode for every strategy.

Invariants: `text == document[start:end]`; strategies without overlap lose no
non-whitespace character; no chunk exceeds its size in the chosen tokenizer; results
are deterministic; repeated passages get their true offsets.
"""

from __future__ import annotations

import pytest
from chunkyard.chunking import Document, build_chunker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_chunking_fakes import FakeEmbeddingModel

FRAGMENTS = [
    "Hello world. ",
    "The end!",
    "¿Qué tal? ¡Bien! ",
    "日本語の文です。次の文！",
    "中文句子没有空格",
    "مرحبا بك؟ ",
    "यह वाक्य है। ",
    "👍🏽👨‍👩‍👧",
    "e\u0301a\u0308\u0323",
    "\r\n",
    "\n\n",
    "\t  ",
    "# Heading\n",
    "```\ncode\n```\n",
    "| a | b |\n",
    "<p>para</p>",
    "<h2>T</h2>",
    "def f(x):\n    return x\n",
    "User: hi\n",
    "x" * 300,
    "word " * 40,
    "3.14159 ",
    "   ",
]

texts = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=30)),
    max_size=40,
).map("".join)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CASES = [
    ({"strategy": "token", "size": 16, "tokenizer": "cl100k"}, False),
    ({"strategy": "token", "size": 16, "overlap": 5, "tokenizer": "cl100k"}, True),
    ({"strategy": "token", "size": 20, "tokenizer": "model"}, False),
    ({"strategy": "token", "size": 12, "overlap": 0.25, "tokenizer": "chars"}, True),
    ({"strategy": "recursive", "size": 20, "tokenizer": "cl100k"}, False),
    ({"strategy": "recursive", "size": 20, "overlap": 8, "tokenizer": "cl100k", "preset": "chroma"}, True),
    ({"strategy": "recursive", "size": 24, "tokenizer": "model", "preset": "markdown"}, False),
    ({"strategy": "recursive", "size": 16, "tokenizer": "cl100k", "preset": "cjk"}, False),
    ({"strategy": "recursive", "size": 16, "tokenizer": "words", "preset": "python"}, False),
    ({"strategy": "sentence", "size": 16, "tokenizer": "cl100k"}, False),
    ({"strategy": "sentence", "size": 24, "tokenizer": "model", "overlap": 4}, True),
    ({"strategy": "markdown", "size": 20, "tokenizer": "cl100k"}, False),
    ({"strategy": "html", "size": 20, "tokenizer": "cl100k"}, False),
    ({"strategy": "code", "size": 20, "tokenizer": "cl100k"}, False),
    ({"strategy": "semantic", "size": 20, "tokenizer": "cl100k"}, False),
    ({"strategy": "cluster", "size": 24, "piece_size": 8, "tokenizer": "cl100k"}, False),
    ({"strategy": "hierarchical", "size": 12, "parent_size": 40, "tokenizer": "cl100k"}, False),
    ({"strategy": "late", "size": 16, "tokenizer": "cl100k"}, False),
    ({"strategy": "adaptive", "size": 20, "tokenizer": "cl100k"}, False),
    (
        {"strategy": "llm", "size": 20, "tokenizer": "cl100k", "context": {"headers": True, "neighbours": 1}},
        False,
    ),
]


class CountingLLM:
    """Deterministic fake LLM: starts a section at every third sentence."""

    def complete(self, prompt: str, *, system: str | None = None) -> str:
        return ", ".join(str(i) for i in range(0, 400, 3))


def case_id(case) -> str:
    spec, _ = case
    return "-".join(str(v) for k, v in spec.items() if k != "context")


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
@SETTINGS
@given(text=texts)
def test_invariants(case, text):
    spec, overlapping = case
    chunker = build_chunker(
        spec, config_key="p", embedding_model=FakeEmbeddingModel(max_seq_length=40), llm=CountingLLM()
    )
    doc = Document("doc", text, title="T")
    chunks = chunker.chunk(doc)
    tokenizer = chunker.tokenizer
    for c in chunks:
        assert c.text == text[c.start : c.end]
        assert 0 <= c.start < c.end <= len(text)
        assert tokenizer.count(c.text) <= spec["size"], (c.text, tokenizer.count(c.text))
        assert c.metadata["strategy"] == spec["strategy"]
        assert c.config_key == "p"
        if spec["strategy"] != "token":
            assert not c.text[0].isspace() and not c.text[-1].isspace()
    # no non-whitespace character is lost
    covered = bytearray(len(text))
    for c in chunks:
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    lost = [i for i, ch in enumerate(text) if not covered[i] and not ch.isspace()]
    assert not lost, (lost[:5], [text[i] for i in lost[:5]])
    if not overlapping:
        spans = sorted((c.start, c.end) for c in chunks)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    # deterministic
    again = chunker.chunk(doc)
    assert [(c.start, c.end, c.embed_text, c.token_count) for c in again] == [
        (c.start, c.end, c.embed_text, c.token_count) for c in chunks
    ]


@pytest.mark.parametrize("strategy", ["token", "recursive", "sentence", "markdown", "semantic"])
@settings(max_examples=10, deadline=None)
@given(passage=st.text(min_size=5, max_size=60).filter(lambda s: s.strip()), repeats=st.integers(2, 6))
def test_repeated_passages_get_true_offsets(strategy, passage, repeats):
    text = (passage + "\n\n") * repeats
    chunker = build_chunker(
        {"strategy": strategy, "size": 12, "tokenizer": "cl100k"}, embedding_model=FakeEmbeddingModel()
    )
    chunks = chunker.chunk(text)
    starts = [c.start for c in chunks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    for c in chunks:
        assert c.text == text[c.start : c.end]
