"""`chunkyard questions generate` against a fake OpenAI-compatible server on 127.0.0.1 (a real HTTP
server in a thread, fixed completions): what is kept, the exact spans, the written JSONL through the
eval-set loader and the evaluation runner, the skips counted, and the endpoint's errors."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from chunkyard.chunking import build_chunker
from chunkyard.chunking.types import Document
from chunkyard.evaluation.generate import (
    ChatClient,
    LLMEndpointError,
    chat_completions_url,
    generate_questions,
    parse_proposals,
    write_eval_set,
)

DOCS = {
    "tides.md": "Tides are caused mainly by the gravitational pull of the Moon on the oceans. "
    "The Sun contributes a smaller effect, and spring tides happen when both align.",
    "bread.md": "Sourdough bread rises because wild yeast and lactic acid bacteria ferment the dough. "
    "A starter is fed with flour and water every day to keep the culture alive. Keep it warm.",
    "lamps.md": "The lighthouse lamp at Hook Head burned whale oil until 1871, when coal gas replaced it. "
    "Keep it warm.",
    "rivers.md": "The Danube flows through ten countries before it reaches the Black Sea.",
    "mountains.md": "Glaciers carved the valleys of the Alps during the last ice age.",
    "deserts.md": "The Atacama desert receives almost no rain in most years, and fog feeds its plants.",
}
SLOW_SECONDS = 1.5

# The fake LLM's fixed completions, chosen by a word of the passage it is shown.
COMPLETIONS = {
    "gravitational": "Here you go:\n```json\n"
    + json.dumps(
        {
            "questions": [
                {
                    "question": "What mainly causes the tides on Earth?",
                    "answer": "the gravitational pull of the Moon",
                },
                # near-duplicate of the first (same words in another order)
                {
                    "question": "What causes tides on the Earth mainly?",
                    "answer": "pull of the Moon on the oceans",
                },
                # paraphrased: not in the text
                {"question": "When do spring tides happen?", "answer": "when the Sun and Moon line up"},
            ]
        }
    )
    + "\n```",
    "Sourdough": json.dumps(
        {
            "questions": [
                {
                    "question": "Why does sourdough bread rise?",
                    "answer": "wild yeast and lactic acid bacteria ferment the dough",
                },
                # generic: no content word of its chunk
                {"question": "How is it described here?", "answer": "A starter is fed with flour and water"},
                # generic: the quote is in two documents
                {"question": "How should a sourdough starter be kept?", "answer": "Keep it warm"},
            ]
        }
    ),
    "lighthouse": json.dumps(  # a bare list, the quote as "quote"
        [{"question": "What fuel did the Hook Head lighthouse lamp burn until 1871?", "quote": "whale oil"}]
    ),
    "Danube": 'Sure! Questions: {"questions": [{"question": "Where does the Danube',  # malformed JSON
    "Atacama": json.dumps({"questions": []}),  # late: a timeout when the client waits 0.5 s
    "Glaciers": json.dumps({"questions": [{"question": "What carved the valleys of the Alps?"}, "a string"]}),
}
KEPT = {
    "What mainly causes the tides on Earth?": ("tides.md", "the gravitational pull of the Moon"),
    "Why does sourdough bread rise?": ("bread.md", "wild yeast and lactic acid bacteria ferment the dough"),
    "What fuel did the Hook Head lighthouse lamp burn until 1871?": ("lamps.md", "whale oil"),
}


class FakeLLM(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: a fixed completion for the passage; `Atacama` answers too late."""

    requests: list[dict] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeLLM.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        prompt = body["messages"][-1]["content"]
        if "Atacama" in prompt:
            time.sleep(SLOW_SECONDS)
        content = next((text for word, text in COMPLETIONS.items() if word in prompt), "{}")
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
        if FakeLLM.status != 200:
            payload = '{"error": {"message": "no such model"}}'
        data = payload.encode()
        self.send_response(FakeLLM.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        try:
            self.end_headers()
            self.wfile.write(data)
        except BrokenPipeError:  # the client timed out and left
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_llm() -> Iterator[str]:
    """The fake server's base URL, on a free loopback port."""
    FakeLLM.requests = []
    FakeLLM.status = 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeLLM)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _documents() -> list[Document]:
    return [Document(doc_id, text) for doc_id, text in DOCS.items()]


def _chunks(documents: list[Document]):
    chunker = build_chunker({"strategy": "recursive", "size": 64, "overlap": 0, "tokenizer": "words"})
    return [c for chunks in chunker.chunk_batch(documents) for c in chunks]


def test_keeps_verbatim_distinct_specific_questions_with_exact_spans(fake_llm, monkeypatch) -> None:
    monkeypatch.setenv("CHUNKYARD_LLM_API_KEY", "secret")
    documents = _documents()
    client = ChatClient(fake_llm, "fake-model", timeout=0.5)
    result = generate_questions(documents, _chunks(documents), client, n=10)
    client.close()
    assert {r["question"] for r in result.records} == set(KEPT)
    for record in result.records:
        doc, quote = KEPT[record["question"]]
        start = DOCS[doc].index(quote)  # test oracle only
        assert record["references"] == [
            {"doc": doc, "start": start, "end": start + len(quote), "text": quote}
        ]
        assert record["source"] == "generated" and record["model"] == "fake-model"
    assert [r["id"] for r in result.records] == ["gen-0001", "gen-0002", "gen-0003"]
    assert dict(result.skipped) == {
        "near_duplicate": 1,
        "not_verbatim": 1,
        "generic": 2,
        "malformed_json": 1,
        "missing_fields": 2,
        "timeout": 1,
    }
    assert result.requests == 6 and "3 question(s) kept" in result.summary()
    assert {r["path"] for r in FakeLLM.requests} == {"/v1/chat/completions"}
    assert all(r["auth"] == "Bearer secret" and r["body"]["model"] == "fake-model" for r in FakeLLM.requests)


def test_written_set_loads_and_evaluates_like_a_hand_written_one(fake_llm, store, embedder, tmp_path) -> None:
    from chunkyard.evaluation.datasets import read_eval_set
    from chunkyard.evaluation.questions import collection_questions
    from chunkyard.evaluation.reports import leaderboard
    from chunkyard.evaluation.runner import EvaluationRequest, evaluate_index, latest_reports
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import Collection, IndexConfig, IndexSpec

    documents = _documents()
    client = ChatClient(fake_llm, "fake-model", timeout=0.5)
    result = generate_questions(documents, _chunks(documents), client, n=10)
    path = write_eval_set(result.records, tmp_path / "evals" / "gentest.generated.jsonl")
    store.documents.sync("gentest", documents, [])
    loaded = read_eval_set(path, store.documents.read("gentest"), on_missing="error")
    assert not loaded.problems and not loaded.missing
    spans = {q.text: q.references[0] for q in loaded.questions}
    for question, (doc, quote) in KEPT.items():
        span = spans[question]
        assert (span.doc_id, DOCS[doc][span.start : span.end]) == (doc, quote)
    # the path the evaluation asset takes for a collection's eval_set
    questions = collection_questions(store, Collection("gentest", eval_set=str(path)))
    assert len(questions.questions) == 3 and not questions.skipped
    config = IndexConfig(
        name="words-12", chunker={"strategy": "token", "size": 12, "overlap": 0, "tokenizer": "words"}
    )
    spec = IndexSpec("gentest", config)
    build_index(store, spec, embedder)
    report = evaluate_index(
        Searcher(store, embedder),
        spec,
        questions.questions,
        EvaluationRequest(variants=("bm25",), k=3, n_resamples=50),
        store=store,
    )
    assert report.n_questions == 3
    assert report.metrics["bm25"]["hit_at_3"] == 1.0
    store.evaluations.record(spec.name, report)
    board = leaderboard(latest_reports(store, [spec.name]))
    assert [(row.index, row.variant, row.n_questions) for row in board.rows] == [
        ("gentest/words-12", "bm25", 3)
    ]
    assert "3 questions" in board.markdown()


def test_endpoint_errors_name_the_url(fake_llm) -> None:
    documents = _documents()
    chunks = _chunks(documents)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    client = ChatClient(f"http://127.0.0.1:{port}/v1", "m", timeout=2)
    with pytest.raises(LLMEndpointError, match=rf"http://127.0.0.1:{port}/v1/chat/completions unreachable"):
        generate_questions(documents, chunks, client, n=2)
    FakeLLM.status = 404
    client = ChatClient(fake_llm, "m", timeout=2)
    with pytest.raises(LLMEndpointError, match=r"/v1/chat/completions answered HTTP 404: .*no such model"):
        generate_questions(documents, chunks, client, n=2)
    FakeLLM.status = 503  # every request fails softly: 5 in a row with no usable answer is an error too
    with pytest.raises(LLMEndpointError, match=r"gave no usable answer to 5 request\(s\) \(5 http_error\)"):
        generate_questions(documents, chunks, client, n=2)


def test_url_rule_and_proposal_parsing() -> None:
    assert chat_completions_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("https://h/openai/chat/completions") == "https://h/openai/chat/completions"
    with pytest.raises(ValueError, match="--llm"):
        chat_completions_url("h:1")
    assert parse_proposals('```json\n{"questions": [{"question": "q"}]}\n```') == [{"question": "q"}]
    assert parse_proposals("no json [at all") is None
    assert parse_proposals('{"questions": "x"}') is None


def test_cli_generate_writes_the_set_and_sets_eval(fake_llm, tmp_path, monkeypatch, capsys) -> None:
    from chunkyard.orchestration.cli import main
    from chunkyard.retrieval.settings.config import load_collections

    for name in (
        "CHUNKYARD_HOME",
        "CHUNKYARD_CONFIGS",
        "CHUNKYARD_BENCHMARKS",
        "DATABASE_URL",
        "DAGSTER_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "proj"
    (root / "notes").mkdir(parents=True)
    for doc_id, text in DOCS.items():
        (root / "notes" / doc_id).write_text(text, encoding="utf-8")
    project = {
        "collections": {"mine": {"folders": ["notes"], "include": ["**/*.md"], "indexes": ["recursive-256"]}}
    }
    (root / "chunkyard.yaml").write_text(yaml.safe_dump(project), encoding="utf-8")
    monkeypatch.setenv("CHUNKYARD_PROJECT", str(root))
    argv = ["questions", "generate", "--collection", "mine", "--llm", fake_llm, "--model", "fake", "--n", "5"]
    assert main([*argv, "--set-eval"]) == 0
    out = capsys.readouterr().out
    assert (
        "3 question(s) kept" in out and "1 malformed_json" in out and "Set collections.mine.eval_set" in out
    )
    written = root / "evals" / "mine.generated.jsonl"
    records = [json.loads(line) for line in written.read_text(encoding="utf-8").splitlines()]
    assert {r["question"] for r in records} == set(KEPT)
    assert load_collections()["mine"].eval_set == "evals/mine.generated.jsonl"

    assert main(argv) == 2  # the file exists: --force overwrites
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists already" in err[0] and "--force" in err[0]
    assert main(["questions", "generate", "--collection", "nope", "--llm", fake_llm]) == 2
    assert "known: mine" in capsys.readouterr().err
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert main([*argv[:5], f"http://127.0.0.1:{port}", "--model", "fake", "--force"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and f"http://127.0.0.1:{port}/v1/chat/completions unreachable" in err[0]
    assert err[1].startswith("hint: --llm takes an OpenAI-compatible server")
    assert len(written.read_text(encoding="utf-8").splitlines()) == 3  # a failed run writes nothing
