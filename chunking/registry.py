"""`build_chunker(spec)`: the `chunker:` mapping of an index config -> a Chunker.

One table, `STRATEGY_TABLE`, says per strategy how it is built, which fields it takes (with
their defaults) and whether it needs the embedding model while chunking. Every field is
validated here, and an error names the field and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chunking.base import BaseChunker, ChunkerConfigError
from chunking.models import DEFAULT_MODEL
from chunking.tokenizers import get_tokenizer

COMMON_FIELDS = {"strategy", "size", "overlap", "tokenizer", "model", "context", "endpoint"}
ENDPOINT_FIELDS = {"base_url", "model", "api_key_env", "timeout"}

THRESHOLD_DEFAULTS = {"percentile": 95.0, "standard_deviation": 3.0, "interquartile": 1.5, "gradient": 95.0}
TOKENIZERS = ("model", "cl100k", "chars", "words")


def needs_embedding_model(chunker: Mapping[str, Any] | str) -> bool:
    """Whether a `chunker:` mapping (or a strategy name) embeds while chunking, so it needs
    `embedding_model=` (and so torch) to build. Unknown strategies need none (build_chunker rejects them)."""
    name = chunker if isinstance(chunker, str) else str(chunker.get("strategy", ""))
    entry = STRATEGY_TABLE.get(name.lower())
    return entry is not None and entry.needs_model


def strategy_entry(name: object) -> Strategy:
    """The table entry of a strategy name; the error lists the known ones."""
    if not isinstance(name, str) or name not in STRATEGY_TABLE:
        raise ChunkerConfigError(
            f"chunker.strategy: unknown {name!r}; expected one of {', '.join(STRATEGIES)}"
        )
    return STRATEGY_TABLE[name]


def _require_int(spec: dict, key: str, default: Any, *, minimum: int = 1) -> int:
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
    size = _require_int(spec, "size", 256, minimum=8)
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

    from chunking.enrichment import build_context_steps

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
    from chunking.llm import OpenAICompatibleClient

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


# -- builders ---------------------------------------------------------------------------


def _recursive_kwargs(options: dict, spec: dict) -> dict:
    from chunking.basic import RECURSIVE_PRESETS

    preset_name = options.get("preset") or "default"
    if preset_name not in RECURSIVE_PRESETS:
        raise ChunkerConfigError(
            f"chunker.preset: unknown {preset_name!r}; expected one of {', '.join(RECURSIVE_PRESETS)}"
        )
    preset = RECURSIVE_PRESETS[preset_name]
    separators = options.get("separators")
    if separators is None:
        separators = preset["separators"]
    elif (
        not isinstance(separators, list) or not all(isinstance(s, str) for s in separators) or not separators
    ):
        raise ChunkerConfigError(
            f"chunker.separators: expected a non-empty list of strings, got {separators!r}"
        )
    keep = options.get("keep_separator")
    keep = preset["keep_separator"] if keep is None else keep
    if keep is True:
        keep = "start"
    if keep not in ("start", "end"):
        raise ChunkerConfigError(f"chunker.keep_separator: expected 'start' or 'end', got {keep!r}")
    is_regex = options.get("is_regex")
    is_regex = preset["is_regex"] if is_regex is None else is_regex
    if not isinstance(is_regex, bool):
        raise ChunkerConfigError(f"chunker.is_regex: expected true or false, got {is_regex!r}")
    if is_regex:
        import re

        for s in separators:
            try:
                re.compile(s)
            except re.error as exc:
                raise ChunkerConfigError(f"chunker.separators: invalid regex {s!r}: {exc}") from exc
    exact = options.get("exact_lengths")
    exact = preset.get("exact_lengths", False) if exact is None else exact
    if not isinstance(exact, bool):
        raise ChunkerConfigError(f"chunker.exact_lengths: expected true or false, got {exact!r}")
    return {
        "separators": separators,
        "keep_separator": keep,
        "is_regex": is_regex,
        "preset": preset_name,
        "exact_lengths": exact,
    }


def _token(common, options, spec, em, llm):
    from chunking.basic import TokenChunker

    return TokenChunker(**common)


def _recursive(common, options, spec, em, llm):
    from chunking.basic import RecursiveChunker

    return RecursiveChunker(**_recursive_kwargs(options, spec), **common)


def _sentence(common, options, spec, em, llm):
    from chunking.basic import SentenceChunker

    return SentenceChunker(**common)


def _markdown(common, options, spec, em, llm):
    from chunking.structured import MarkdownChunker

    return MarkdownChunker(**common)


def _html(common, options, spec, em, llm):
    from chunking.structured import HtmlChunker

    strip = options["strip_tags"]
    if not isinstance(strip, bool):
        raise ChunkerConfigError(f"chunker.strip_tags: expected true or false, got {strip!r}")
    return HtmlChunker(strip_tags=strip, **common)


def _code(common, options, spec, em, llm):
    from chunking.code import CodeChunker

    language = options["language"]
    if language is not None and not isinstance(language, str):
        raise ChunkerConfigError(f"chunker.language: expected a language name, got {language!r}")
    return CodeChunker(language=language, **common)


def _semantic(common, options, spec, em, llm):
    from chunking.semantic import SemanticChunker

    kind = options["threshold_type"]
    if kind not in THRESHOLD_DEFAULTS:
        raise ChunkerConfigError(
            f"chunker.threshold_type: unknown {kind!r}; expected one of {', '.join(THRESHOLD_DEFAULTS)}"
        )
    threshold = options["threshold"]
    threshold = THRESHOLD_DEFAULTS[kind] if threshold is None else threshold
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ChunkerConfigError(f"chunker.threshold: expected a number, got {threshold!r}")
    if kind in ("percentile", "gradient") and not 0 <= threshold <= 100:
        raise ChunkerConfigError(f"chunker.threshold: a percentile must be in [0, 100], got {threshold}")
    buffer = _require_int(options, "buffer", 1, minimum=0)
    min_size = _require_int(options, "min_size", 0, minimum=0)
    return SemanticChunker(
        embedding_model=em,
        threshold_type=kind,
        threshold=float(threshold),
        buffer=buffer,
        min_size=min_size,
        **common,
    )


def _cluster(common, options, spec, em, llm):
    from chunking.semantic import ClusterChunker

    piece_size = _require_int(options, "piece_size", 50, minimum=4)
    if piece_size > common["size"]:
        raise ChunkerConfigError(f"chunker.piece_size: {piece_size} must not exceed size {common['size']}")
    return ClusterChunker(embedding_model=em, piece_size=piece_size, **common)


def _hierarchical(common, options, spec, em, llm):
    from chunking.hierarchical import HierarchicalChunker

    parent_size = _require_int(options, "parent_size", 1024, minimum=8)
    if parent_size <= common["size"]:
        raise ChunkerConfigError(f"chunker.parent_size: {parent_size} must exceed size {common['size']}")
    base = options["base"]
    if base not in ("recursive", "sentence", "token"):
        raise ChunkerConfigError(f"chunker.base: expected recursive, sentence or token, got {base!r}")
    return HierarchicalChunker(parent_size=parent_size, base=base, **common)


def _late(common, options, spec, em, llm):
    from chunking.late import LateChunker

    base = options["base"]
    if base not in ("recursive", "sentence", "token"):
        raise ChunkerConfigError(f"chunker.base: expected recursive, sentence or token, got {base!r}")
    window = options["window"]
    if window is not None:
        window = _require_int(options, "window", 0, minimum=common["size"])
    lookbehind = options["lookbehind"]
    if isinstance(lookbehind, bool) or not isinstance(lookbehind, int | float) or not 0 <= lookbehind < 1:
        raise ChunkerConfigError(f"chunker.lookbehind: expected a fraction in [0, 1), got {lookbehind!r}")
    return LateChunker(embedding_model=em, base=base, window=window, lookbehind=float(lookbehind), **common)


def _adaptive(common, options, spec, em, llm):
    from chunking.adaptive import AdaptiveChunker

    return AdaptiveChunker(**common)


def _llm(common, options, spec, em, llm):
    from chunking.llm import LLMChunker

    if llm is None:
        raise ChunkerConfigError(
            "chunker.endpoint: strategy 'llm' needs an LLM endpoint ({base_url, model}) or llm=OpenAICompatibleClient(...)"
        )
    max_sentences = _require_int(options, "max_sentences", 60, minimum=2)
    return LLMChunker(llm=llm, max_sentences=max_sentences, **common)


Builder = Callable[[dict, dict, dict, Any, Any], BaseChunker]


@dataclass(frozen=True)
class Strategy:
    """One chunking strategy: how it is built (`build(common, options, spec, embedding_model, llm)`),
    its own fields besides the common ones (with defaults), and whether it embeds while chunking."""

    name: str
    build: Builder
    fields: Mapping[str, Any] = field(default_factory=dict)
    needs_model: bool = False


STRATEGY_TABLE: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("token", _token),
        Strategy(
            "recursive",
            _recursive,
            {
                "preset": "default",
                "separators": None,
                "keep_separator": None,
                "is_regex": None,
                "exact_lengths": None,
            },
        ),
        Strategy("sentence", _sentence),
        Strategy("markdown", _markdown, {"preset": "markdown"}),
        Strategy("html", _html, {"strip_tags": True}),
        Strategy("code", _code, {"language": None}),
        Strategy(
            "semantic",
            _semantic,
            {"threshold_type": "percentile", "threshold": None, "buffer": 1, "min_size": 0},
            needs_model=True,
        ),
        Strategy("cluster", _cluster, {"piece_size": 50}, needs_model=True),
        Strategy("hierarchical", _hierarchical, {"parent_size": 1024, "base": "recursive"}),
        Strategy("late", _late, {"base": "sentence", "window": None, "lookbehind": 0.25}, needs_model=True),
        Strategy("adaptive", _adaptive),
        Strategy("llm", _llm, {"max_sentences": 60}),
    )
}
STRATEGIES: tuple[str, ...] = tuple(STRATEGY_TABLE)
