"""The `embedder:` options of an OpenAI-compatible endpoint backend, validated; its errors and usage tally."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENDPOINT_BACKEND = "openai"
TOKENIZERS = ("cl100k", "model", "chars")


class EndpointConfigError(ValueError):
    """An endpoint backend's `embedder:` option is invalid; the message names the option."""


class EndpointError(RuntimeError):
    """The endpoint failed (after its retries) or answered something unusable; the message says which."""


@dataclass
class EndpointUsage:
    """What the endpoint was asked for: requests sent (retries included), retries, tokens the server
    counted (its `usage.prompt_tokens`) and seconds spent waiting for answers, summed over requests."""

    requests: int = 0
    retries: int = 0
    tokens: int = 0
    texts: int = 0
    seconds: float = 0.0

    def minus(self, before: EndpointUsage) -> EndpointUsage:
        return EndpointUsage(
            self.requests - before.requests,
            self.retries - before.retries,
            self.tokens - before.tokens,
            self.texts - before.texts,
            round(self.seconds - before.seconds, 3),
        )

    def as_metadata(self) -> dict[str, int | float]:
        return {
            "endpoint_requests": self.requests,
            "endpoint_retries": self.retries,
            "endpoint_tokens": self.tokens,
            "endpoint_texts": self.texts,
            "endpoint_seconds": round(self.seconds, 3),
        }


def _positive(options: Mapping[str, Any], name: str, default: float, kind: type) -> Any:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise EndpointConfigError(f"embedder.{name}: must be a positive number, got {value!r}")
    if kind is int and value != int(value):
        raise EndpointConfigError(f"embedder.{name}: must be a positive integer, got {value!r}")
    return kind(value)


@dataclass(frozen=True)
class EndpointSettings:
    """The validated `embedder:` options of an endpoint backend."""

    url: str
    model: str
    dimensions: int | None = None
    api_key_env: str | None = None
    batch_size: int = 32  # texts per request (TEI's default max_client_batch_size is 32)
    batch_tokens: int = 16384  # tokens per request (TEI's default max_batch_tokens)
    concurrency: int = 4  # requests in flight at once
    timeout: float = 60.0  # seconds per request while indexing
    query_timeout: float = 5.0  # seconds per request for a search's query
    max_retries: int = 6  # while indexing; a query gets at most one retry
    max_input_tokens: int = 8191  # the model's input limit, for the too-long chunk count
    tokenizer: str = "cl100k"  # how tokens are counted for `batch_tokens`

    OPTIONS = (
        "url",
        "model",
        "dimensions",
        "api_key_env",
        "batch_size",
        "batch_tokens",
        "concurrency",
        "timeout",
        "query_timeout",
        "max_retries",
        "max_input_tokens",
        "tokenizer",
    )

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> EndpointSettings:
        """Settings from an index config's `embedder:` mapping (also `backend`, and the local
        options the bundled defaults set when they do not apply: `device: cpu`, `quantize: null`)."""
        unknown = set(options) - set(cls.OPTIONS) - {"backend", "device", "quantize"}
        if unknown:
            raise EndpointConfigError(
                f"embedder: unknown option(s) {sorted(unknown)} for backend openai; allowed {list(cls.OPTIONS)}"
            )
        if options.get("quantize") is not None:
            raise EndpointConfigError(
                "embedder.quantize: the server runs its own model; set `quantize: null` (the bundled "
                "defaults' int8 is for the onnx backend)"
            )
        if options.get("device", "cpu") != "cpu":
            raise EndpointConfigError(
                "embedder.device: an endpoint backend embeds on its server; leave it out"
            )
        url = options.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise EndpointConfigError(f"embedder.url: expected the server's http(s) base URL, got {url!r}")
        model = options.get("model")
        if not isinstance(model, str) or not model:
            raise EndpointConfigError(
                f"embedder.model: expected the model name the server serves, got {model!r}"
            )
        dimensions = options.get("dimensions")
        if dimensions is not None:
            dimensions = _positive(options, "dimensions", 0, int)
        key_env = options.get("api_key_env")
        if key_env is not None and (not isinstance(key_env, str) or not key_env):
            raise EndpointConfigError(
                f"embedder.api_key_env: expected an environment variable name, got {key_env!r}"
            )
        tokenizer = options.get("tokenizer", cls.tokenizer)
        if tokenizer not in TOKENIZERS:
            raise EndpointConfigError(
                f"embedder.tokenizer: expected one of {list(TOKENIZERS)}, got {tokenizer!r}"
            )
        max_retries = options.get("max_retries", cls.max_retries)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise EndpointConfigError(
                f"embedder.max_retries: must be a whole number >= 0, got {max_retries!r}"
            )
        return cls(
            url=url.rstrip("/"),
            model=model,
            dimensions=dimensions,
            api_key_env=key_env,
            batch_size=_positive(options, "batch_size", cls.batch_size, int),
            batch_tokens=_positive(options, "batch_tokens", cls.batch_tokens, int),
            concurrency=_positive(options, "concurrency", cls.concurrency, int),
            timeout=_positive(options, "timeout", cls.timeout, float),
            query_timeout=_positive(options, "query_timeout", cls.query_timeout, float),
            max_retries=max_retries,
            max_input_tokens=_positive(options, "max_input_tokens", cls.max_input_tokens, int),
            tokenizer=tokenizer,
        )

    @property
    def embeddings_url(self) -> str:
        """`url` is the API base (`http://host:8080/v1`); a URL already ending in /embeddings is kept."""
        return self.url if self.url.endswith("/embeddings") else f"{self.url}/embeddings"

    @property
    def model_id(self) -> str:
        """The embedding cache key: the served model (and its `dimensions`), not the host serving it."""
        return f"openai:{self.model}" + (f"@{self.dimensions}d" if self.dimensions else "")


def endpoint_identity(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """What of an endpoint config shapes the vectors (backend, model, dimensions), for the config hash."""
    if options.get("backend") != ENDPOINT_BACKEND:
        return None
    return {
        key: options.get(key) for key in ("backend", "model", "dimensions") if options.get(key) is not None
    }


def check_endpoint_options(options: Any) -> None:
    """Validate an endpoint backend's `embedder:` options (at config load); other backends pass."""
    if isinstance(options, Mapping) and endpoint_identity(options) is not None:
        EndpointSettings.from_options(options)
