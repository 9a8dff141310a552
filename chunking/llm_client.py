"""LLM access over an OpenAI-compatible HTTP endpoint (chunking's `llm` strategy, question generation)."""

from __future__ import annotations

import os


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
