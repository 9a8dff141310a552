"""Sentence embeddings from an OpenAI-compatible `/v1/embeddings` endpoint (TEI, vLLM, Ollama, OpenAI).

Requests are cut by count and by tokens to stay within the server's limits, run a few at a time,
and are retried with tenacity (exponential backoff with jitter, or the server's `Retry-After`) on
429, 5xx, timeouts and dropped connections. The API key is read from the environment variable the
config names and goes only into the `Authorization` header: never into an error, a log or a repr.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import httpx
import numpy as np
import tenacity
from chunkyard.chunking.models import DEFAULT_MODEL
from chunkyard.retrieval.embedders.batching import budget_batches
from chunkyard.retrieval.embedders.endpoint_settings import (
    ENDPOINT_BACKEND,
    EndpointConfigError,
    EndpointError,
    EndpointSettings,
    EndpointUsage,
)
from chunkyard.retrieval.observability.telemetry import span

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is capped: the step's own timeout governs beyond that


class _Retryable(Exception):
    """A 429/5xx answer worth another try; `retry_after` is the server's `Retry-After` in seconds."""

    def __init__(self, status: int, retry_after: float | None, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (a number of seconds or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class _WaitRetryAfter(tenacity.wait.wait_base):
    """The server's `Retry-After` when it sent one (capped), else exponential backoff with jitter."""

    def __init__(self) -> None:
        self._backoff = tenacity.wait_exponential_jitter(multiplier=0.5, max=20.0, jitter=0.5)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, MAX_RETRY_AFTER_S)
        return self._backoff(retry_state)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TimeoutException | httpx.TransportError)


class EndpointEmbedder:
    """An embedding model behind an OpenAI-compatible HTTP endpoint, with the `Embedder` interface.

    `model_id` (the cache key) names the endpoint's model; `dim` is `dimensions` or, when not set,
    learnt from the first answer. With `queries`, requests use `query_timeout` and at most one retry.
    """

    backend = ENDPOINT_BACKEND
    code_version = "1"  # bump when this class changes the vectors it asks for (their assets' versions follow)
    model_path = None  # no local files: the stage's local-model check does not apply
    quantize = None

    def __init__(self, embedding_model: str, settings: EndpointSettings, *, queries: bool = False) -> None:
        self.settings = settings
        self.model_name = embedding_model  # the index config's model: its tokenizer when `tokenizer: model`
        self.model_id = settings.model_id
        self.max_seq_length = settings.max_input_tokens
        self.batch_size = settings.batch_size
        self.queries = queries
        self._timeout = settings.query_timeout if queries else settings.timeout
        self._max_retries = min(settings.max_retries, 1) if queries else settings.max_retries
        self._dim = settings.dimensions
        self._key = self._read_key(settings.api_key_env)
        self._lock = threading.Lock()
        self._usage = EndpointUsage()
        self._checked = (-math.inf, "")  # (monotonic time, problem) of the last readiness probe
        self._client = httpx.Client(
            timeout=httpx.Timeout(self._timeout, connect=min(self._timeout, 10.0)),
            limits=httpx.Limits(
                max_connections=settings.concurrency, max_keepalive_connections=settings.concurrency
            ),
            headers={"Authorization": f"Bearer {self._key}"} if self._key else {},
            trust_env=False,  # the configured URL only: no proxy from the environment sees the key
        )
        self._tokenizer: Any = None

    @staticmethod
    def _read_key(variable: str | None) -> str | None:
        if variable is None:
            return None
        key = os.environ.get(variable)
        if not key:
            raise EndpointConfigError(f"embedder.api_key_env: the environment variable {variable} is not set")
        return key

    def __repr__(self) -> str:
        return f"EndpointEmbedder({self.model_id!r}, url={self.settings.url!r}, queries={self.queries})"

    @property
    def dim(self) -> int:
        """The vectors' dimension: `dimensions`, else asked of the endpoint once (a probe text)."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    @property
    def usage(self) -> EndpointUsage:
        """A copy of the running totals (subtract an earlier copy for one step's share)."""
        with self._lock:
            return EndpointUsage(**vars(self._usage))

    @property
    def tokenizer(self) -> Any:
        """Counts tokens for `batch_tokens`: cl100k (OpenAI's models), the index's local model, or chars."""
        if self._tokenizer is None:
            from chunkyard.chunking.tokenizers import get_tokenizer

            name = self.settings.tokenizer
            tokenizer = get_tokenizer(name, self.model_name if name == "model" else DEFAULT_MODEL)
            self._tokenizer = tokenizer if hasattr(tokenizer, "count_batch") else _BatchCounter(tokenizer)
        return self._tokenizer

    def embed_tokens(self, text: str) -> Any:
        raise EndpointConfigError(
            "embedder.backend: an endpoint has no contextual token vectors (late chunking and the maxsim "
            "reranker need them); use backend torch or onnx for this index"
        )

    token_embeddings = embed_tokens

    def request_batches(self, counts: list[int]) -> list[list[int]]:
        """Positions cut into requests of at most `batch_size` texts and `batch_tokens` tokens."""
        return budget_batches(counts, self.settings.batch_size, self.settings.batch_tokens)

    def embed(self, texts: list[str], role: str = "document") -> np.ndarray:
        """L2-normalised float32 vectors, shape (len(texts), dim), requests run `concurrency` at once.
        `role` (document or query) is the Embedder's: a server's model gets the texts as they are."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings, not a single string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        counts = [1] * len(texts) if len(texts) <= 1 else self.tokenizer.count_batch(texts)
        pieces = list(self.embed_stream(texts, self.request_batches(counts)))
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for positions, piece in pieces:
            vectors[positions] = piece
        return vectors

    def embed_stream(
        self, texts: list[str], batches: list[list[int]]
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """(positions, vectors) per request as each answer arrives, `concurrency` requests in flight.

        The indexing stage caches each answer as it comes, so a crash loses only unanswered requests.
        """
        if len(batches) == 1:
            yield batches[0], self._request([texts[i] for i in batches[0]])
            return
        queue = iter(batches)
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="embedding-endpoint") as pool:
            running: dict[Future, list[int]] = {}
            try:
                for positions in queue:
                    running[pool.submit(self._request, [texts[i] for i in positions])] = positions
                    if len(running) >= self.settings.concurrency:
                        break
                while running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        positions = running.pop(future)
                        vectors = future.result()
                        following = next(queue, None)
                        if following is not None:
                            running[pool.submit(self._request, [texts[i] for i in following])] = following
                        yield positions, vectors
            finally:
                for future in running:
                    future.cancel()

    def _request(self, texts: list[str], retries: int | None = None) -> np.ndarray:
        """One request, retried on 429/5xx/timeouts; the vectors checked and normalised."""
        attempts = (self._max_retries if retries is None else retries) + 1
        body: dict[str, Any] = {"input": texts, "model": self.settings.model, "encoding_format": "float"}
        if self.settings.dimensions:
            body["dimensions"] = self.settings.dimensions
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_retryable),
            wait=_WaitRetryAfter(),
            stop=tenacity.stop_after_attempt(attempts),
            before_sleep=self._count_retry,
            reraise=True,
        )
        try:
            payload = retrying(self._post, body)
        except _Retryable as exc:
            raise EndpointError(
                f"embedding endpoint {self.settings.embeddings_url}: {exc} after {attempts} attempt(s)"
            ) from None
        except httpx.TimeoutException:
            raise EndpointError(
                f"embedding endpoint {self.settings.embeddings_url}: no answer within {self._timeout:g} s "
                f"(embedder.{'query_timeout' if self.queries else 'timeout'}) after "
                f"{attempts} attempt(s)"
            ) from None
        except httpx.TransportError as exc:
            raise EndpointError(
                f"embedding endpoint {self.settings.embeddings_url}: {type(exc).__name__}: {exc} "
                f"after {attempts} attempt(s)"
            ) from None
        return self._vectors(payload, len(texts))

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            with span(
                "embedding_server.request", model=str(body.get("model", "")), texts=len(body["input"])
            ) as call:
                response = self._client.post(self.settings.embeddings_url, json=body)
                call.set_attribute("http.response.status_code", response.status_code)
        finally:
            with self._lock:
                self._usage.requests += 1
                self._usage.seconds += time.perf_counter() - started
        if response.status_code in RETRY_STATUSES or response.status_code >= 500:
            raise _Retryable(response.status_code, _retry_after(response), _detail(response))
        if response.status_code != 200:
            hint = ""
            if response.status_code in (401, 403):
                hint = (
                    f" (check the key in ${self.settings.api_key_env})"
                    if self.settings.api_key_env
                    else (" (the server wants a key: set embedder.api_key_env)")
                )
            raise EndpointError(
                f"embedding endpoint {self.settings.embeddings_url}: HTTP {response.status_code}{hint}: "
                f"{_detail(response)}"
            )
        try:
            payload = response.json()
        except ValueError:
            raise EndpointError(
                f"embedding endpoint {self.settings.embeddings_url}: the answer is not JSON: {_detail(response)}"
            ) from None
        usage = payload.get("usage") if isinstance(payload, dict) else None
        with self._lock:
            self._usage.texts += len(body["input"])
            if isinstance(usage, dict):
                self._usage.tokens += int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0)
        return payload

    def _count_retry(self, retry_state: tenacity.RetryCallState) -> None:
        with self._lock:
            self._usage.retries += 1
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        log.warning(
            "embedding endpoint %s: %s; retry %d in %.2f s",
            self.settings.embeddings_url,
            type(exc).__name__ if not isinstance(exc, _Retryable) else f"HTTP {exc.status}",
            retry_state.attempt_number,
            retry_state.upcoming_sleep,
        )

    def _vectors(self, payload: Any, n: int) -> np.ndarray:
        """The answer's vectors in input order, checked: count, model, dimension, finite; L2-normalised."""
        where = f"embedding endpoint {self.settings.embeddings_url}"
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != n:
            got = len(data) if isinstance(data, list) else "no `data` list"
            raise EndpointError(f"{where}: expected {n} embeddings, got {got}")
        served = payload.get("model")
        if isinstance(served, str) and served and not _same_model(served, self.settings.model):
            raise EndpointError(
                f"{where}: the server answered with model {served!r}, but embedder.model is "
                f"{self.settings.model!r}; set embedder.model to the model it serves"
            )
        try:
            ordered = sorted(data, key=lambda item: int(item.get("index", 0)))
            vectors = np.asarray([item["embedding"] for item in ordered], dtype=np.float32)
        except (TypeError, ValueError, KeyError, AttributeError):
            raise EndpointError(f"{where}: the embeddings are not lists of numbers of one length") from None
        if vectors.ndim != 2:
            raise EndpointError(f"{where}: the embeddings are not lists of numbers of one length")
        with self._lock:
            if self._dim is None:
                self._dim = int(vectors.shape[1])
            expected = self._dim
        if vectors.shape[1] != expected:
            source = "embedder.dimensions" if self.settings.dimensions else "the endpoint's first answer"
            raise EndpointError(
                f"{where}: model {self.settings.model!r} returned {vectors.shape[1]}-dimensional vectors, "
                f"expected {expected} ({source})"
            )
        if not np.isfinite(vectors).all():
            raise EndpointError(f"{where}: an embedding has non-finite values")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def unavailable(self, max_age_s: float = 10.0) -> str:
        """'' when the endpoint embedded a probe text within `max_age_s` (asked now, once, with the query
        timeout if not), else why not."""
        with self._lock:
            checked_at, problem = self._checked
        if time.monotonic() - checked_at > max_age_s:
            try:
                self._request(["readiness probe"], retries=0)  # one try: a probe must answer fast
                problem = ""
            except (EndpointError, httpx.HTTPError) as exc:
                problem = str(exc)
            with self._lock:
                self._checked = (time.monotonic(), problem)
        return problem

    def close(self) -> None:
        self._client.close()


class _BatchCounter:
    """`count_batch` over a tokenizer that only has `count`."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        return int(self._tokenizer.count(text))

    def count_batch(self, texts: list[str]) -> list[int]:
        return [int(self._tokenizer.count(t)) for t in texts]


def _same_model(served: str, configured: str) -> bool:
    """Ollama tags its models (`nomic-embed-text:latest`); TEI answers with the repo id."""
    return served == configured or served.startswith(f"{configured}:") or served.endswith(f"/{configured}")


def _detail(response: httpx.Response) -> str:
    """The server's error message, short (never the request, which carries the key's header)."""
    text = response.text.strip().replace("\n", " ")
    return text[:300] + ("..." if len(text) > 300 else "") if text else response.reason_phrase


_shared: dict[tuple, EndpointEmbedder] = {}
_shared_lock = threading.Lock()


def shared_endpoint_embedder(
    embedding_model: str, options: Mapping[str, Any], *, queries: bool = False
) -> EndpointEmbedder:
    """One EndpointEmbedder per (options, queries) per process: one connection pool and usage tally."""
    settings = EndpointSettings.from_options(options)
    key = (embedding_model, settings, queries)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = EndpointEmbedder(embedding_model, settings, queries=queries)
        return _shared[key]


def forget_shared_endpoint_embedders() -> None:
    """Close and drop the shared endpoint embedders (tests: a fresh usage tally and readiness probe)."""
    with _shared_lock:
        for embedder in _shared.values():
            embedder.close()
        _shared.clear()
