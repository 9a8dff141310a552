"""A project's own LLM tokenizer (`llm_tokenizers:` in chunkyard.yaml): budgets counted in its tokens, by name."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from chunkyard.chunking.llm_encodings import SOURCE_WHEEL, SOURCES_DIR
from chunkyard.chunking.llm_tokenizer_file import TokenizerFile
from chunkyard.chunking.tokenizers import get_tokenizer
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.budget import llm_tokenizer
from chunkyard.retrieval.settings.option_schema import SearchError
from chunkyard.retrieval.settings.options import SearchOptions
from chunkyard.retrieval.store import Store

from tests.test_indexing_support import garden_index, multilingual_index

DATA = Path(__file__).parent / "data" / "multilingual"
NAMES = ("huerto.md", "tren.md", "biblioteca.md")
# A real LLM's byte-level BPE tokenizer.json (Claude 2's), inside the wheel `make install` downloads
# beside the environment (requirements/llm_encodings.txt); it stands for a Llama 3 or Qwen file.
MEMBER = "litellm/litellm_core_utils/tokenizers/anthropic_tokenizer.json"
needs_wheel = pytest.mark.skipif(
    not (SOURCES_DIR / SOURCE_WHEEL).is_file(),
    reason=f"{SOURCES_DIR / SOURCE_WHEEL} is absent: `make install` downloads it (requirements/llm_encodings.txt)",
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose chunkyard.yaml names its LLM's tokenizer.json `claude`, by a relative path."""
    folder = tmp_path / "models" / "claude"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(SOURCES_DIR / SOURCE_WHEEL) as wheel:
        (folder / "tokenizer.json").write_bytes(wheel.read(MEMBER))
    (tmp_path / "chunkyard.yaml").write_text("llm_tokenizers:\n  claude: models/claude\n", encoding="utf-8")
    monkeypatch.setenv("CHUNKYARD_PROJECT", str(tmp_path))
    return tmp_path


@needs_wheel
def test_a_budget_counted_in_the_projects_own_tokenizer(project: Path, store: Store, embedder) -> None:
    """Real model, chunker, Postgres and tokenizer file: the budget holds in that tokenizer's tokens,
    which are not cl100k's, and every trimmed hit is still an exact span."""
    claude = TokenizerFile("claude", project / "models" / "claude" / "tokenizer.json")
    spec, texts = multilingual_index(store, embedder, "hi", "recursive-96-llm-file")
    searcher = Searcher(store, embedder)
    cl100k = get_tokenizer("cl100k")
    question = "सामुदायिक बगीचा कहाँ है?"
    served = searcher.search(question, spec.name, k=5, max_context_tokens=200, llm_tokenizer="claude")
    assert served and any(r.scores.get("trimmed") for r in served)
    assert sum(claude.count(r.text) for r in served) <= 200
    for result in served:
        assert result.scores["llm_tokens"] == claude.count(result.text)
        assert result.text == texts[result.doc_id][result.start : result.end]
    whole = " ".join(texts.values())
    assert claude.count(whole) != cl100k.count(whole)  # counted in the file's tokens, not cl100k's
    with pytest.raises(SearchError, match=r"^llm_tokenizer: unknown 'llama3'; expected one of .*claude"):
        searcher.search(question, spec.name, k=5, llm_tokenizer="llama3")  # refused without a budget too


@needs_wheel
def test_byte_level_pieces_of_one_character_are_one_span(project: Path, capsys) -> None:
    claude = llm_tokenizer("claude")
    assert isinstance(claude, TokenizerFile) and llm_tokenizer("claude") is claude  # loaded once
    text = "ग्लेशियर 🚂 train"
    spans = claude.spans(text)
    assert spans[0][0] == 0 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert "".join(text[s:e] for s, e in spans).replace(" ", "") == text.replace(" ", "")
    assert claude.count(text) >= len(spans)
    from chunkyard.orchestration.cli import main

    assert main(["models", "list"]) == 0
    listed = project / "models" / "claude" / "tokenizer.json"
    assert f"llm tokenizer claude: {listed.resolve()}" in capsys.readouterr().out


def test_a_request_names_a_tokenizer_never_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("../models/tokenizer.json", "/etc/passwd", "", "a b"):
        with pytest.raises(SearchError, match="^llm_tokenizer: a tokenizer's name"):
            SearchOptions(llm_tokenizer=value)
    (tmp_path / "chunkyard.yaml").write_text("llm_tokenizers:\n  cl100k_base: x.json\n", encoding="utf-8")
    monkeypatch.setenv("CHUNKYARD_PROJECT", str(tmp_path))
    with pytest.raises(SearchError, match=r"chunkyard.yaml:2: llm_tokenizers.cl100k_base: .*built in"):
        llm_tokenizer("mine")
    (tmp_path / "chunkyard.yaml").write_text("llm_tokenizers:\n  mine: none/here.json\n", encoding="utf-8")
    with pytest.raises(SearchError, match=r"llm_tokenizers.mine: .*here.json not found"):
        llm_tokenizer("mine")
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    (tmp_path / "chunkyard.yaml").write_text("llm_tokenizers:\n  mine: bad.json\n", encoding="utf-8")
    with pytest.raises(
        SearchError, match=r"^llm_tokenizer: mine: .*bad.json is not a Hugging Face tokenizer.json"
    ):
        llm_tokenizer("mine")
    assert llm_tokenizer("cl100k_base").count("hello world") == 2  # the built-in ones need no project


@needs_wheel
def test_http_and_eval_take_the_name(project: Path, store: Store, embedder, capsys) -> None:
    from chunkyard.pipeline.benchmark.cli import build_parser
    from chunkyard.retrieval.api.service import create_app
    from fastapi.testclient import TestClient

    spec = garden_index(store, embedder)
    http = TestClient(create_app(Searcher(store, embedder)), raise_server_exceptions=False)
    body = {"query": "where is the community garden", "index": spec.name, "k": 2, "mode": "bm25"}
    found = http.post("/v1/search", json={**body, "max_context_tokens": 20, "llm_tokenizer": "claude"})
    assert found.status_code == 200, found.text
    claude = llm_tokenizer("claude")
    results = found.json()["results"]
    assert results and sum(claude.count(r["text"]) for r in results) <= 20
    path = http.post("/v1/search", json={**body, "max_context_tokens": 12, "llm_tokenizer": "../x.json"})
    assert path.status_code == 422 and "llm_tokenizer" in path.text
    unknown = http.post("/v1/search", json={**body, "llm_tokenizer": "llama3"})
    assert unknown.status_code in (400, 422) and "unknown 'llama3'" in unknown.text
    assert build_parser().parse_args(["--llm-tokenizer", "claude"]).llm_tokenizer == "claude"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--llm-tokenizer", "llama3"])
    assert (
        "--llm-tokenizer: unknown 'llama3'; expected one of cl100k_base, o200k_base, claude"
        in capsys.readouterr().err
    )
