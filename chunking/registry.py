"""`build_chunker(chunker)`: the `chunker:` mapping of an index config -> a Chunker.

One table, `STRATEGY_TABLE`, says per strategy how it is built, which fields it takes (with
their defaults), whether it needs the embedding model while chunking and its code version. Every field is
validated here, and an error names the field and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.chunkers import (
    adaptive,
    cluster,
    code,
    hierarchical,
    html,
    late,
    llm,
    markdown,
    recursive,
    semantic,
    sentence,
    token,
)
from chunkyard.chunking.fields import require_int, resolve_overlap
from chunkyard.chunking.models import DEFAULT_MODEL
from chunkyard.chunking.tokenizers import get_tokenizer

COMMON_FIELDS = {"strategy", "size", "overlap", "tokenizer", "model", "context", "endpoint", "max_llm_tokens"}
ENDPOINT_FIELDS = {"base_url", "model", "api_key_env", "timeout"}

TOKENIZERS = ("model", "cl100k", "o200k", "chars", "words")


def needs_embedding_model(chunker: Mapping[str, Any] | str) -> bool:
    """Whether a `chunker:` mapping (or a strategy name) embeds while chunking, so it needs
    `embedding_model=` (and so torch) to build. Unknown strategies need none (build_chunker rejects them)."""
    name = chunker if isinstance(chunker, str) else str(chunker.get("strategy", ""))
    entry = STRATEGY_TABLE.get(name.lower())
    return entry is not None and entry.needs_model


def strategy_versions(chunker: Mapping[str, Any]) -> dict[str, str]:
    """The declared code versions of the strategies a `chunker:` mapping runs (its own and its base's);
    none for an unknown strategy."""
    entry = STRATEGY_TABLE.get(str(chunker.get("strategy", "")))
    return entry.code_versions(chunker) if entry is not None else {}


def strategy_entry(name: object) -> Strategy:
    """The table entry of a strategy name; the error lists the known ones."""
    if not isinstance(name, str) or name not in STRATEGY_TABLE:
        raise ChunkerConfigError(
            f"chunker.strategy: unknown {name!r}; expected one of {', '.join(STRATEGIES)}"
        )
    return STRATEGY_TABLE[name]


def build_chunker(
    chunker: dict[str, Any],
    *,
    config_key: str = "",
    embedding_model: Any = None,
    llm: Any = None,
) -> BaseChunker:
    """Build a chunker from its `chunker:` mapping, e.g. `{strategy: recursive, size: 256}`."""
    if not isinstance(chunker, dict):
        raise ChunkerConfigError(f"chunker: expected a mapping, got {type(chunker).__name__}")
    entry = strategy_entry(chunker.get("strategy"))
    strategy = entry.name
    allowed = COMMON_FIELDS | set(entry.fields)
    unknown = sorted(set(chunker) - allowed)
    if unknown:
        raise ChunkerConfigError(
            f"chunker.{unknown[0]}: not a field of strategy {strategy!r}; allowed: {', '.join(sorted(allowed))}"
        )
    size = require_int(chunker, "size", 256, minimum=8)
    overlap = resolve_overlap(chunker, size)
    tokenizer_name = chunker.get("tokenizer", "model")
    if tokenizer_name not in TOKENIZERS:
        raise ChunkerConfigError(
            f"chunker.tokenizer: unknown {tokenizer_name!r}; expected one of {', '.join(TOKENIZERS)}"
        )
    model = chunker.get("model", DEFAULT_MODEL)
    if not isinstance(model, str) or not model:
        raise ChunkerConfigError(f"chunker.model: expected a model name, got {model!r}")
    try:
        tokenizer = (
            get_tokenizer(tokenizer_name, model)
            if tokenizer_name == "model"
            else get_tokenizer(tokenizer_name)
        )
    except ValueError as exc:
        field = "model" if tokenizer_name == "model" else "tokenizer"
        raise ChunkerConfigError(f"chunker.{field}: {exc}") from exc
    if size - getattr(tokenizer, "special_tokens", 0) - overlap < 4:
        raise ChunkerConfigError(
            f"chunker.size: {size} leaves too few tokens after overlap and special tokens"
        )

    max_llm_tokens = chunker.get("max_llm_tokens")
    if max_llm_tokens is not None:
        max_llm_tokens = require_int(chunker, "max_llm_tokens", 0, minimum=16)

    from chunkyard.chunking.enrichment import build_context_steps

    if llm is None and chunker.get("endpoint") is not None:
        llm = client_from_endpoint(chunker["endpoint"])
    context = build_context_steps(chunker.get("context"), llm=llm)
    common = {
        "tokenizer": tokenizer,
        "size": size,
        "overlap": overlap,
        "config_key": config_key,
        "context": context,
        "max_llm_tokens": max_llm_tokens,
    }
    options = {k: chunker.get(k, d) for k, d in entry.fields.items()}
    if entry.needs_model and embedding_model is None:
        raise ChunkerConfigError(
            f"chunker.strategy: {strategy!r} needs an embedding_model (pass embedding_model=...)"
        )
    return entry.build(common, options, chunker, embedding_model, llm)


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


Build = Callable[[dict, dict, dict, Any, Any], BaseChunker]


@dataclass(frozen=True)
class Strategy:
    """One chunking strategy: its `build(common, options, chunker, embedding_model, llm)` (in its module
    `chunking.chunkers.<name>`), its own fields besides the common ones (with defaults), whether it
    embeds while chunking, and its code version: bump `code_version` when its module (or what only it
    runs) changes the chunks it makes; the versions of the assets of its configs follow, no other's."""

    name: str
    build: Build
    fields: Mapping[str, Any] = field(default_factory=dict)
    needs_model: bool = False
    code_version: str = "1"

    def code_versions(self, chunker: Mapping[str, Any]) -> dict[str, str]:
        """The declared versions a config of this strategy runs: its own, and its `base` strategy's."""
        base = chunker.get("base", self.fields.get("base"))
        own = {self.name: self.code_version}
        if isinstance(base, str) and base in STRATEGY_TABLE and base != self.name:
            return {**own, **STRATEGY_TABLE[base].code_versions({})}
        return own


STRATEGY_TABLE: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("token", token.build),
        Strategy(
            "recursive",
            recursive.build,
            {
                "preset": "default",
                "separators": None,
                "keep_separator": None,
                "is_regex": None,
                "exact_lengths": None,
                "headings": None,
            },
        ),
        Strategy("sentence", sentence.build),
        Strategy("markdown", markdown.build, {"preset": "markdown"}),
        Strategy("html", html.build, {"strip_tags": True}),
        Strategy("code", code.build, {"language": None}),
        Strategy(
            "semantic",
            semantic.build,
            {"threshold_type": "percentile", "threshold": None, "buffer": 1, "min_size": 0},
            needs_model=True,
        ),
        Strategy("cluster", cluster.build, {"piece_size": 50}, needs_model=True),
        Strategy("hierarchical", hierarchical.build, {"parent_size": 1024, "base": "recursive"}),
        Strategy(
            "late", late.build, {"base": "sentence", "window": None, "lookbehind": 0.25}, needs_model=True
        ),
        Strategy("adaptive", adaptive.build),
        Strategy("llm", llm.build, {"max_sentences": 60}),
    )
}
STRATEGIES: tuple[str, ...] = tuple(STRATEGY_TABLE)
