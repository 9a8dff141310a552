"""Eval-set questions generated from a collection's own chunks by an OpenAI-compatible chat endpoint.

An LLM is shown one chunk at a time and asked for questions whose answer it quotes verbatim from
the chunk. What it says is only a proposal: a question is kept when its quote occurs exactly once
in the whole collection (so its span is exact and no other chunk answers it), the question has at
least `MIN_QUESTION_WORDS` words and a content word of its chunk, and it is no near-duplicate of a
question already kept (token Jaccard >= `DUPLICATE_JACCARD`). Everything else is counted in
`Generation.skipped`, never raised: malformed JSON, missing fields, paraphrased quotes, timeouts.
Only an endpoint that cannot serve (refused or timed-out connection, HTTP 4xx, or no usable answer
to the first `MAX_FAILURES_BEFORE_ANSWER` requests) raises `LLMEndpointError`, naming the URL.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from chunkyard.chunking.types import Chunk, Document
from chunkyard.evaluation.datasets.locate import locate_answer

API_KEY_ENV = "CHUNKYARD_LLM_API_KEY"
MIN_QUESTION_WORDS = 4
MIN_ANSWER_CHARS = 3
DUPLICATE_JACCARD = 0.7
QUESTIONS_PER_CHUNK = 3
# Failed requests in a row, before any usable answer, after which the endpoint is given up on.
MAX_FAILURES_BEFORE_ANSWER = 5
SYSTEM_PROMPT = (
    "You write evaluation questions for a search engine over a user's documents. You answer only with JSON."
)
USER_PROMPT = """Passage from the document {doc!r}:
<<<
{text}
>>>
Write up to {count} questions that a person could ask and that this passage answers. Each question
must make sense on its own (name the subject; never say "the passage" or "this text"). For each,
copy the shortest exact quote from the passage that answers it, character for character.
Answer with JSON only: {{"questions": [{{"question": "...", "answer": "exact quote"}}]}}"""
_WORD = re.compile(r"\w+", re.UNICODE)
# Words every question may contain; a question needs a word of its chunk beyond these.
_FUNCTION_WORDS_TEXT = (
    "what which who whom whose when where why how does did do is are was were the a an of in on to for "
    "and or with by from at as that this these those it its be been can could would should will about "
    "into than then there their they them you your much many"
)
_FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())


class LLMEndpointError(RuntimeError):
    """The endpoint cannot serve (refused, HTTP 4xx, never a usable answer); the message names it."""


def chat_completions_url(url: str) -> str:
    """The POST target for `url`: as given when it ends in /chat/completions, `{url}/chat/completions`
    when it ends in /v1, else `{url}/v1/chat/completions` (a server root such as Ollama's or vLLM's)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--llm: expected an http(s) URL, got {url!r}")
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return f"{url}/chat/completions" if url.endswith("/v1") else f"{url}/v1/chat/completions"


class ChatClient:
    """One POST per prompt to an OpenAI-compatible chat endpoint (Bearer key from CHUNKYARD_LLM_API_KEY).

    `complete` returns the message text, or None for a failure worth skipping (a timeout, HTTP 5xx,
    a body that is no chat completion); the reason is in `last_failure`."""

    def __init__(self, url: str, model: str, *, timeout: float = 60.0, temperature: float = 0.0) -> None:
        self.url = chat_completions_url(url)
        self.model = model
        self.temperature = temperature
        key = os.environ.get(API_KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, trust_env=False)
        self.last_failure = ""

    def close(self) -> None:
        self._http.close()

    def complete(self, prompt: str, *, system: str = SYSTEM_PROMPT) -> str | None:
        body = {
            "model": self.model,
            "temperature": self.temperature,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        }
        try:
            response = self._http.post(self.url, json=body)
        except httpx.ConnectTimeout as exc:
            raise LLMEndpointError(f"LLM endpoint {self.url} unreachable: connect timeout") from exc
        except httpx.TimeoutException:
            self.last_failure = "timeout"
            return None
        except httpx.HTTPError as exc:
            raise LLMEndpointError(f"LLM endpoint {self.url} unreachable: {exc}") from exc
        if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
            raise LLMEndpointError(
                f"LLM endpoint {self.url} answered HTTP {response.status_code}: "
                f"{' '.join(response.text.split())[:160]}"
            )
        if response.status_code != 200:
            self.last_failure = "http_error"
            return None
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str):
            self.last_failure = "bad_response"
            return None
        return content


@dataclass
class Generation:
    """The kept eval-set records, what was skipped and why (reason -> count), and the request count."""

    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    proposed: int = 0

    def summary(self) -> str:
        reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(self.skipped.items()))
        return (
            f"{len(self.records)} question(s) kept of {self.proposed} proposed in {self.requests} "
            f"request(s); skipped: {reasons or 'none'}"
        )


def parse_proposals(content: str) -> list[Any] | None:
    """The list of proposed items in an LLM answer (code fences and chatter around the JSON are
    tolerated); None when no JSON object or list can be read from it."""
    for start, char in enumerate(content):
        if char not in "[{":
            continue
        try:
            value, _ = json.JSONDecoder().raw_decode(content, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            value = value.get("questions")
        if isinstance(value, list):
            return value
    return None


def words(text: str) -> set[str]:
    """Lowercased word tokens: what near-duplicate and content-word checks compare."""
    return {w.lower() for w in _WORD.findall(text)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def select_chunks(chunks: Sequence[Chunk], limit: int, seed: int) -> list[Chunk]:
    """Up to `limit` chunks spread over the collection, in a seeded order (same seed, same chunks)."""
    usable = [c for c in chunks if len(c.text.split()) >= MIN_QUESTION_WORDS]
    random.Random(seed).shuffle(usable)
    return usable[:limit]


def generate_questions(
    documents: Sequence[Document],
    chunks: Sequence[Chunk],
    client: ChatClient,
    *,
    n: int = 50,
    per_chunk: int = QUESTIONS_PER_CHUNK,
    max_requests: int | None = None,
    seed: int = 0,
    id_prefix: str = "gen",
) -> Generation:
    """Ask `client` about chunks until `n` questions are kept or `max_requests` (default 3 n) are made.

    Each kept record is an eval-set question with one exact reference span
    (`{"doc", "start", "end", "text"}`) plus `source`, `model` and the chunk's span."""
    if n < 1:
        raise ValueError(f"--n: expected a positive number of questions, got {n}")
    by_id = {d.id: d for d in documents}
    result = Generation()
    kept_words: list[set[str]] = []
    budget = max_requests if max_requests is not None else 3 * n
    answered = False
    for chunk in select_chunks(chunks, budget, seed):
        if len(result.records) >= n:
            break
        document = by_id.get(chunk.doc_id)
        if document is None:
            result.skipped["chunk_without_document"] += 1
            continue
        result.requests += 1
        content = client.complete(USER_PROMPT.format(doc=chunk.doc_id, text=chunk.text, count=per_chunk))
        if content is None:
            result.skipped[client.last_failure or "failed_request"] += 1
            if not answered and result.requests >= MAX_FAILURES_BEFORE_ANSWER:
                break
            continue
        answered = True
        proposals = parse_proposals(content)
        if proposals is None:
            result.skipped["malformed_json"] += 1
            continue
        for item in proposals[:per_chunk]:
            result.proposed += 1
            record, reason = _judge(item, chunk, document, documents, kept_words)
            if record is None:
                result.skipped[reason] += 1
                continue
            if len(result.records) >= n:
                break
            record = {"id": f"{id_prefix}-{len(result.records) + 1:04d}", **record, "model": client.model}
            result.records.append(record)
            kept_words.append(words(record["question"]))
    if result.requests and not answered:
        raise LLMEndpointError(
            f"LLM endpoint {client.url} gave no usable answer to {result.requests} request(s) "
            f"({result.summary().partition('skipped: ')[2]})"
        )
    return result


def _judge(
    item: Any,
    chunk: Chunk,
    document: Document,
    documents: Sequence[Document],
    kept_words: Sequence[set[str]],
) -> tuple[dict[str, Any] | None, str]:
    """The record for one proposal, or None and the reason it is skipped."""
    if not isinstance(item, dict):
        return None, "missing_fields"
    question = item.get("question")
    answer = next((item[k] for k in ("answer", "quote") if isinstance(item.get(k), str)), None)
    if not isinstance(question, str) or not question.strip() or not answer or not answer.strip():
        return None, "missing_fields"
    question = " ".join(question.split())
    answer = answer.strip()
    if len(answer) < MIN_ANSWER_CHARS:
        return None, "generic"
    located = locate_answer(answer, documents)
    if not located.exact:  # absent, or present only when case and whitespace are ignored
        return None, "not_verbatim"
    inside = [
        s for s in located.spans if s.doc_id == chunk.doc_id and chunk.start <= s.start <= s.end <= chunk.end
    ]
    if not inside:
        return None, "not_verbatim"  # quoted from elsewhere than the chunk shown
    if len(located.spans) > 1:
        return None, "generic"  # the quote answers in several places: no single span is the answer
    question_words = words(question)
    content = {w for w in question_words - _FUNCTION_WORDS if len(w) >= 3 and not w.isdigit()}
    if len(question.split()) < MIN_QUESTION_WORDS or not content & words(chunk.text):
        return None, "generic"
    if any(jaccard(question_words, seen) >= DUPLICATE_JACCARD for seen in kept_words):
        return None, "near_duplicate"
    span = inside[0]
    return {
        "question": question,
        "references": [{"doc": span.doc_id, "start": span.start, "end": span.end, "text": answer}],
        "source": "generated",
        "chunk": [chunk.start, chunk.end],
    }, ""


def write_eval_set(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write records as eval-set JSON Lines (docs/configuration.md, Evaluation sets); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
