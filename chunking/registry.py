"""`build_chunker(spec)`: the `chunker:` mapping of an index config -> a Chunker.

One table, `STRATEGY_TABLE`, says per strategy how it is built, which fields it takes (with
their defaults) and whether it needs the embedding model while chunking. Every field is
validated here, and an error names the field and what was expected.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.models import DEFAULT_MODEL
from chunkyard.chunking.tokenizers import get_tokenizer

COMMON_FIELDS = {"strategy", "size", "overlap", "tokenizer", "model", "context", "endpoint"}
ENDPOINT_FIELDS = {"base_url", "model", "api_key_env", "timeout"}

TOKENIZERS = ("model", "cl100k", "chars", "words")


def needs_embedding_model(chunker: Mapping[str, Any] | str) -> bool:
    """Whether a `chunker:` mapping (or a strategy name) embeds while chunking, so it needs
    `embedding_model=` (and so torch) to build. Unknown strategies need none (build_chunker rejects them)."""
    name = chunker if isinstance(chunker, str) else str(chunker.get("strategy", ""))
    entry = STRATEGY_TABLE.get(name.lower())
    return entry is not None and entry.needs_model


def chunker_modules(chunker: Mapping[str, Any]) -> list[str]:
    """The strategy modules a `chunker:` mapping runs (for code versions); none for an unknown strategy."""
    entry = STRATEGY_TABLE.get(str(chunker.get("strategy", "")))
    return entry.modules(chunker) if entry is not None else []


def strategy_entry(name: object) -> Strategy:
    """The table entry of a strategy name; the error lists the known ones."""
    if not isinstance(name, str) or name not in STRATEGY_TABLE:
        raise ChunkerConfigError(
            f"chunker.strategy: unknown {name!r}; expected one of {', '.join(STRATEGIES)}"
        )
    return STRATEGY_TABLE[name]


def require_int(spec: dict, key: str, default: Any, *, minimum: int = 1) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChunkerConfigError(f"chunker.{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ChunkerConfigError(f"chunker.{key}: must be >= {minimum}, got {value}")
    return value


def resolve_overlap(spec: dict, size: int) -> int:
    """`overlap` is an int (tokens) or a float in [0, 1) (fraction of `size`)."""
    value = spec.get("overlap", 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ChunkerConfigError(
            f"chunker.overlap: expected tokens (int) or a fraction (float), got {value!r}"
        )
    if isinstance(value, float):
        if not 0.0 <= value < 1.0:
            raise ChunkerConfigError(f"chunker.overlap: a fraction must be in [0, 1), got {value}")
        return int(round(value * size))
    if value < 0 or value >= size:
        raise ChunkerConfigError(f"chunker.overlap: must be >= 0 and < size ({size}), got {value}")
    return value


def build_chunker(
    spec: dict[str, Any],
    *,
    config_key: str = "",
    embedding_model: Any = None,
    llm: Any = None,
) -> BaseChunker:
    """Build a chunker from a config mapping, e.g. `{strategy: recursive, size: 256}`."""
    if not isinstance(spec, dict):
        raise ChunkerConfigError(f"chunker: expected a mapping, got {type(spec).__name__}")
    entry = strategy_entry(spec.get("strategy"))
    strategy = entry.name
    allowed = COMMON_FIELDS | set(entry.fields)
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ChunkerConfigError(
            f"chunker.{unknown[0]}: not a field of strategy {strategy!r}; allowed: {', '.join(sorted(allowed))}"
        )
    size = require_int(spec, "size", 256, minimum=8)
    overlap = resolve_overlap(spec, size)
    tokenizer_name = spec.get("tokenizer", "model")
    if tokenizer_name not in TOKENIZERS:
        raise ChunkerConfigError(
            f"chunker.tokenizer: unknown {tokenizer_name!r}; expected one of {', '.join(TOKENIZERS)}"
        )
    model = spec.get("model", DEFAULT_MODEL)
    if not isinstance(model, str) or not model:
        raise ChunkerConfigError(f"chunker.model: expected a model name, got {model!r}")
    try:
        tokenizer = (
            get_tokenizer(tokenizer_name, model)
            if tokenizer_name == "model"
            else get_tokenizer(tokenizer_name)
        )
    except ValueError as exc:
        raise ChunkerConfigError(f"chunker.model: {exc}") from exc
    if size - getattr(tokenizer, "special_tokens", 0) - overlap < 4:
        raise ChunkerConfigError(
            f"chunker.size: {size} leaves too few tokens after overlap and special tokens"
        )

    from chunkyard.chunking.enrichment import build_context_steps

    if llm is None and spec.get("endpoint") is not None:
        llm = client_from_endpoint(spec["endpoint"])
    context = build_context_steps(spec.get("context"), llm=llm)
    common = {
        "tokenizer": tokenizer,
        "size": size,
        "overlap": overlap,
        "config_key": config_key,
        "context": context,
    }
    options = {k: spec.get(k, d) for k, d in entry.fields.items()}
    if entry.needs_model and embedding_model is None:
        raise ChunkerConfigError(
            f"chunker.strategy: {strategy!r} needs an embedding_model (pass embedding_model=...)"
        )
    return entry.build(common, options, spec, embedding_model, llm)


def client_from_endpoint(endpoint: Any) -> Any:
    """`endpoint: {base_url, model, api_key_env, timeout}` -> an OpenAI-compatible client."""
    from chunkyard.chunking.llm_client import OpenAICompatibleClient

    if not isinstance(endpoint, dict):
        raise ChunkerConfigError(
            f"chunker.endpoint: expected a mapping with base_url and model, got {endpoint!r}"
        )
    unknown = sorted(set(endpoint) - ENDPOINT_FIELDS)
    if unknown:
        raise ChunkerConfigError(
            f"chunker.endpoint.{unknown[0]}: unknown; expected {', '.join(sorted(ENDPOINT_FIELDS))}"
        )
    for key in ("base_url", "model"):
        if not isinstance(endpoint.get(key), str) or not endpoint.get(key):
            raise ChunkerConfigError(f"chunker.endpoint.{key}: required (a string)")
    timeout = endpoint.get("timeout", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ChunkerConfigError(f"chunker.endpoint.timeout: expected seconds > 0, got {timeout!r}")
    api_key_env = endpoint.get("api_key_env")
    if api_key_env is not None and not isinstance(api_key_env, str):
        raise ChunkerConfigError(
            f"chunker.endpoint.api_key_env: expected an environment variable name, got {api_key_env!r}"
        )
    try:
        return OpenAICompatibleClient(
            endpoint["base_url"], endpoint["model"], api_key_env=api_key_env, timeout=float(timeout)
        )
    except ValueError as exc:
        raise ChunkerConfigError(f"chunker.endpoint.base_url: {exc}") from exc


@dataclass(frozen=True)
class Strategy:
    """One chunking strategy: its own fields besides the common ones (with defaults), and whether it
    embeds while chunking. Its code is the module `chunking.chunkers.<name>`, imported only when a
    config names it (so a strategy's code version covers that module, not every strategy's)."""

    name: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    needs_model: bool = False

    @property
    def module(self) -> str:
        return f"chunkyard.chunking.chunkers.{self.name}"

    def build(self, common: dict, options: dict, spec: dict, embedding_model: Any, llm: Any) -> BaseChunker:
        """`build(common, options, spec, embedding_model, llm)` of the strategy's module."""
        return importlib.import_module(self.module).build(common, options, spec, embedding_model, llm)

    def modules(self, spec: Mapping[str, Any]) -> list[str]:
        """The strategy modules a config of this strategy runs: its own, and its `base` strategy's."""
        base = spec.get("base", self.fields.get("base"))
        own = [self.module]
        return (
            own + STRATEGY_TABLE[base].modules({})
            if isinstance(base, str) and base in STRATEGY_TABLE
            else own
        )


STRATEGY_TABLE: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("token"),
        Strategy(
            "recursive",
            {
                "preset": "default",
                "separators": None,
                "keep_separator": None,
                "is_regex": None,
                "exact_lengths": None,
                "headings": None,
            },
        ),
        Strategy("sentence"),
        Strategy("markdown", {"preset": "markdown"}),
        Strategy("html", {"strip_tags": True}),
        Strategy("code", {"language": None}),
        Strategy(
            "semantic",
            {"threshold_type": "percentile", "threshold": None, "buffer": 1, "min_size": 0},
            needs_model=True,
        ),
        Strategy("cluster", {"piece_size": 50}, needs_model=True),
        Strategy("hierarchical", {"parent_size": 1024, "base": "recursive"}),
        Strategy("late", {"base": "sentence", "window": None, "lookbehind": 0.25}, needs_model=True),
        Strategy("adaptive"),
        Strategy("llm", {"max_sentences": 60}),
    )
}
STRATEGIES: tuple[str, ...] = tuple(STRATEGY_TABLE)
