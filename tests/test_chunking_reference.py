"""Recursive and sentence chunking give exactly the spans they gave before the speed work.

The reference (`tests/data/chunking_reference.json`, with the demo docs it was made from beside it) holds, per (config, document), a short hash of
the `(start, end)` list, generated from the code before it was optimised (issue 14). Regenerate only
for an intended change of boundaries: `python -m tests.test_chunking_reference --write`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from chunkyard.chunking import Document, build_chunker

from tests.conftest import CHROMA_DIR

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "tests" / "data" / "chunking_reference.json"
# The demo docs as they were when the reference was stored (docs/ keeps changing; the spans must not).
DEMO_DOCS = REPO / "tests" / "data" / "chunking_reference_docs"
CHROMA_CORPORA = ("state_of_the_union", "wikitexts", "chatlogs", "finance", "pubmed")

# `headings: false` where the preset's default is on: the reference pins the splitting and merging;
# joining a heading to the text it titles (issue 26) is tested in test_chunking.py.
NO_HEADINGS = {"headings": False}
CONFIGS: dict[str, dict] = {
    "recursive-256-cl100k": {"strategy": "recursive", "size": 256, "tokenizer": "cl100k", **NO_HEADINGS},
    "recursive-64-16-cl100k": {
        "strategy": "recursive",
        "size": 64,
        "overlap": 16,
        "tokenizer": "cl100k",
        **NO_HEADINGS,
    },
    "recursive-chroma-250": {"strategy": "recursive", "size": 250, "tokenizer": "cl100k", "preset": "chroma"},
    "recursive-chroma-200-50": {
        "strategy": "recursive",
        "size": 200,
        "overlap": 50,
        "tokenizer": "cl100k",
        "preset": "chroma",
    },
    "recursive-markdown-128": {
        "strategy": "recursive",
        "size": 128,
        "tokenizer": "cl100k",
        "preset": "markdown",
        **NO_HEADINGS,
    },
    "recursive-256-model": {"strategy": "recursive", "size": 256, "tokenizer": "model", **NO_HEADINGS},
    "sentence-256-cl100k": {"strategy": "sentence", "size": 256, "tokenizer": "cl100k"},
    "sentence-100-25-cl100k": {"strategy": "sentence", "size": 100, "overlap": 25, "tokenizer": "cl100k"},
    "sentence-256-model": {"strategy": "sentence", "size": 256, "tokenizer": "model"},
}


def documents() -> dict[str, str]:
    """The demo docs (as stored with the reference) always; the Chroma corpora where present."""
    docs = {f"docs/{p.name}": p.read_text(encoding="utf-8") for p in sorted(DEMO_DOCS.glob("*.md"))}
    for name in CHROMA_CORPORA:
        path = CHROMA_DIR / f"{name}.md"
        if path.is_file():
            docs[f"chroma/{name}"] = path.read_text(encoding="utf-8")
    return docs


def span_hash(spans: list[tuple[int, int]]) -> str:
    raw = ";".join(f"{s},{e}" for s, e in spans).encode()
    return f"{len(spans)}:{hashlib.sha256(raw).hexdigest()[:16]}"


def current_hashes(doc_names: list[str] | None = None) -> dict[str, dict[str, str]]:
    docs = documents()
    out: dict[str, dict[str, str]] = {}
    for key, spec in CONFIGS.items():
        chunker = build_chunker(spec)
        out[key] = {}
        for name, text in docs.items():
            if doc_names is None or name in doc_names:
                chunks = chunker.chunk(Document(name, text))
                out[key][name] = span_hash([(c.start, c.end) for c in chunks])
    return out


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, str]]:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_spans_match_the_stored_reference(config, reference):
    docs = documents()
    chunker = build_chunker(CONFIGS[config])
    expected = reference[config]
    for name, text in docs.items():
        if name not in expected:
            continue  # a corpus added after the reference was stored
        chunks = chunker.chunk(Document(name, text))
        assert all(c.text == text[c.start : c.end] for c in chunks)
        assert span_hash([(c.start, c.end) for c in chunks]) == expected[name], (config, name)


def test_reference_covers_the_demo_docs(reference):
    demo = {name for name in documents() if name.startswith("docs/")}
    for config in CONFIGS:
        assert demo <= set(reference[config]), config


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python -m tests.test_chunking_reference --write")
    REFERENCE.write_text(json.dumps(current_hashes(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {REFERENCE}")
