"""Per-key limits in one service process: requests per second (a token bucket) and concurrent searches."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from chunkyard.chunking.environment import env_float, env_int

RATE_ENV = "CHUNKYARD_KEY_RATE"
CONCURRENCY_ENV = "CHUNKYARD_KEY_CONCURRENCY"
DEFAULT_RATE_PER_S = 50.0
DEFAULT_MAX_CONCURRENT = 8


class RateLimited(Exception):
    """A key is over one of its limits; `retry_after_s` is when to try again (whole seconds, at least 1)."""

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Limits:
    """A key's limits: requests per second (burst: one second's worth) and searches at once; 0: none."""

    rate_per_s: float = DEFAULT_RATE_PER_S
    max_concurrent: int = DEFAULT_MAX_CONCURRENT

    @classmethod
    def from_environment(cls) -> Limits:
        """The default for keys that set none: CHUNKYARD_KEY_RATE and CHUNKYARD_KEY_CONCURRENCY."""
        return cls(
            rate_per_s=env_float(RATE_ENV, DEFAULT_RATE_PER_S, unit="a number (0: no limit)"),
            max_concurrent=env_int(
                CONCURRENCY_ENV, DEFAULT_MAX_CONCURRENT, minimum=0, unit="an integer (0: no limit)"
            )
            or 0,
        )

    def over(self, rate_per_s: float | None, max_concurrent: int | None) -> Limits:
        """A key's own values where it has them, else these."""
        return Limits(
            rate_per_s=self.rate_per_s if rate_per_s is None else float(rate_per_s),
            max_concurrent=self.max_concurrent if max_concurrent is None else int(max_concurrent),
        )


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class RateLimiter:
    """The buckets and in-flight search counts of every key this process has seen (by key name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._searching: dict[str, int] = {}

    def admit(self, key: str, limits: Limits) -> None:
        """Take one request from `key`'s bucket, or raise RateLimited with the wait for the next."""
        rate = limits.rate_per_s
        if rate <= 0:
            return
        burst = max(1.0, rate)
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(burst, now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.stamp) * rate)
            bucket.stamp = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return
            wait = (1.0 - bucket.tokens) / rate
        raise RateLimited(
            f"key {key!r} is over its rate limit ({rate:g} requests/s)", max(1, math.ceil(wait))
        )

    @contextlib.contextmanager
    def search_slot(self, key: str, limits: Limits) -> Iterator[None]:
        """Hold one of `key`'s concurrent searches for the block, or raise RateLimited when all are busy."""
        most = limits.max_concurrent
        with self._lock:
            running = self._searching.get(key, 0)
            if most > 0 and running >= most:
                raise RateLimited(f"key {key!r} has {running} searches running (its limit: {most})", 1)
            self._searching[key] = running + 1
        try:
            yield
        finally:
            with self._lock:
                self._searching[key] -= 1
