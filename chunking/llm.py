"""LLM access over an OpenAI-compatible HTTP endpoint, and the `llm` chunking strategy.

Off by default: nothing here runs unless a config names the strategy (or
`context: {llm: true}`) and an `OpenAICompatibleClient` is passed to `build_chunker`.
"""

from __future__ import annotations

import os
import re
from typing import Any

from chunking.base import BaseChunker, DocText, Piece, extend_overlap
from chunking.basic import pack_spans, sentence_spans


class LLMError(RuntimeError):
    """The endpoint failed or answered something unusable."""


class OpenAICompatibleClient:
    """POST {base_url}/chat/completions; the API key (if any) comes from an env variable."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        temperature: float = 0.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url: expected an http(s) URL, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.temperature = temperature

    def complete(self, prompt: str, *, system: str | None = None) -> str:
        import httpx

        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise LLMError(f"api_key_env: environment variable {self.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        body = {"model": self.model, "messages": messages, "temperature": self.temperature}
        try:
            response = httpx.post(
                f"{self.base_url}/chat/completions", json=body, headers=headers, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            raise LLMError(f"LLM endpoint {self.base_url} unreachable: {exc}") from exc
        if response.status_code != 200:
            raise LLMError(
                f"LLM endpoint {self.base_url} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            return str(response.json()["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                f"LLM endpoint {self.base_url}: unexpected response shape: {response.text[:200]}"
            ) from exc


SYSTEM_PROMPT = (
    "You split documents into topically coherent sections for a search index. "
    "You answer only with sentence numbers."
)
BOUNDARY_PROMPT = (
    "Below are numbered sentences of a document. Decide where a new topic or section "
    "starts. Answer with the numbers of the sentences that START a new section, "
    "comma-separated (for example: 4, 9, 15). Answer 'none' if there is no new section.\n\n{sentences}"
)
_NUMBER = re.compile(r"\d+")


class LLMChunker(BaseChunker):
    """Sentences numbered and shown to the LLM in windows of `max_sentences`; the
    sentences it names start new chunks. Sections over the size are re-packed by
    sentences, so the limit holds whatever the LLM says."""

    strategy = "llm"

    def __init__(self, *, llm: Any, max_sentences: int = 60, **kw: Any) -> None:
        super().__init__(**kw)
        self.llm = llm
        self.max_sentences = max_sentences

    def pieces(self, dt: DocText) -> list[Piece]:
        text = dt.text
        sentences = [
            w for s in sentence_spans(text) for w in pack_spans(dt.units, [s], self.base_budget, text)
        ]
        if not sentences:
            return []
        starts = {0}
        for w0 in range(0, len(sentences), self.max_sentences):
            window = sentences[w0 : w0 + self.max_sentences]
            listing = "\n".join(f"[{w0 + k}] {text[s:e]}" for k, (s, e) in enumerate(window))
            answer = self.llm.complete(BOUNDARY_PROMPT.format(sentences=listing), system=SYSTEM_PROMPT)
            for m in _NUMBER.finditer(answer):
                k = int(m.group())
                if w0 < k < w0 + len(window):
                    starts.add(k)
        bounds = [*sorted(starts), len(sentences)]
        out: list[Piece] = []
        for gi, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            for s, e in pack_spans(dt.units, sentences[a:b], self.base_budget, text):
                out.append(Piece(s, e, {"llm_section": gi}))
        return extend_overlap(out, dt.units, self.overlap, len(text), text)
