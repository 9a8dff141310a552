"""Admission control for searches: what cannot be answered within the stated latency gets 503 at once.

Without it every search is started: under 200 concurrent searches on 2 cores each one waited its
turn for the CPU, p95 12.4 s and a maximum of 20.7 s. `Admission` runs at most `slots` searches at
a time, first come first served, and measures how often a slot comes free. A search that would wait
for a slot longer than the stated latency allows (by the searches ahead of it and that pace), or
that waited that long and got none, is answered `503` with `Retry-After` (the seconds until the
searches ahead should be done) without being started, so a client learns at once to come back
later and the searches that were admitted keep their latency.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections import deque
from dataclasses import dataclass

from chunkyard.chunking.environment import env_float, env_int
from chunkyard.retrieval.api.http_guards import ASGIApp, Receive, Scope, Send

LATENCY_ENV = "CHUNKYARD_SEARCH_LATENCY_S"
SLOTS_ENV = "CHUNKYARD_SEARCH_SLOTS"
ADMITTED_PATHS = ("/v1/search",)
MEAN_WEIGHT = 0.2  # weight of the newest search in the running mean of search time
ESTIMATE_MARGIN = 2.0  # a search is queued only when twice its expected wait fits the budget
TURNOVER_WEIGHT = 0.1  # weight of the newest gap between two slots coming free (gaps vary more)


def default_slots() -> int:
    """Two searches per CPU (one embeds its query while the other waits on Postgres), at least 4."""
    return max(4, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class AdmissionLimits:
    """The stated latency (seconds from admission to answer a search may take, waiting included)
    and how many searches run at once."""

    latency_s: float = 2.0
    slots: int = 0  # 0: default_slots()

    def __post_init__(self) -> None:
        if not 0 < self.latency_s <= 600:
            raise ValueError(f"latency_s: must be more than 0 and at most 600 seconds, got {self.latency_s}")
        if self.slots < 0:
            raise ValueError(f"slots: must be 0 (two per CPU) or more, got {self.slots}")

    @property
    def running(self) -> int:
        return self.slots or default_slots()

    @classmethod
    def from_env(cls) -> AdmissionLimits:
        """The defaults, overridden by CHUNKYARD_SEARCH_LATENCY_S and CHUNKYARD_SEARCH_SLOTS."""
        latency = env_float(
            LATENCY_ENV, cls.latency_s, above_minimum=True, maximum=600, unit="a number of seconds"
        )
        return cls(latency_s=latency, slots=env_int(SLOTS_ENV, 0, minimum=1) or 0)


class Admission:
    """ASGI middleware: searches (`ADMITTED_PATHS`) run at most `limits.running` at once, and one
    that cannot finish within `limits.latency_s` is refused with 503 and `Retry-After` at once."""

    def __init__(self, app: ASGIApp, limits: AdmissionLimits) -> None:
        self.app = app
        self.limits = limits
        self.slots = limits.running
        self.running = 0
        self.waiting: deque[asyncio.Future[bool]] = deque()
        self.search_s = 0.0  # running mean of one search's time in the app (0 until one ran)
        self.turnover_s = 0.0  # running mean of the time between two slots coming free, while busy
        self._busy_release: float | None = None  # when a slot last came free with searches waiting
        self.admitted = 0
        self.refused = 0

    def expected_wait_s(self) -> float:
        """How long a search arriving now would wait for a slot: the searches ahead of it times the
        measured time between two slots coming free (what the machine delivers now, other work on it
        included), or, before that was measured, their share of the mean search time."""
        if self.running < self.slots and not self.waiting:
            return 0.0
        ahead = len(self.waiting) + 1
        return ahead * self.turnover_s if self.turnover_s else ahead / self.slots * self.search_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in ADMITTED_PATHS:
            await self.app(scope, receive, send)
            return
        if not self._free_slot():
            budget = self.limits.latency_s - self.search_s  # what waiting may take and still answer in time
            # the estimate is judged with a margin (it can be off by half), so a search that would
            # have to be refused after waiting is mostly refused at once instead
            if ESTIMATE_MARGIN * self.expected_wait_s() > budget or not await self._queued(budget):
                self.refused += 1
                await self._refuse(send, self.expected_wait_s())
                return
        self.admitted += 1
        started = time.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            took = time.monotonic() - started
            self.search_s = (
                took if not self.search_s else (1 - MEAN_WEIGHT) * self.search_s + MEAN_WEIGHT * took
            )
            self._release()

    def _free_slot(self) -> bool:
        """Take a slot if one is free and nobody waits for it (an idle server always admits)."""
        if self.running < self.slots and not self.waiting:
            self.running += 1
            return True
        return False

    async def _queued(self, budget_s: float) -> bool:
        """True once this search holds a slot; False when none came free within `budget_s`."""
        if budget_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[bool] = loop.create_future()
        self.waiting.append(turn)
        timer = loop.call_later(budget_s, lambda: turn.done() or turn.set_result(False))
        try:
            granted = await turn
        except asyncio.CancelledError:  # the client went away while waiting
            if turn in self.waiting:
                self.waiting.remove(turn)
            elif turn.done() and not turn.cancelled() and turn.result():
                self._release()  # the slot came just before the cancellation: pass it on
            raise
        finally:
            timer.cancel()
        if not granted and turn in self.waiting:
            self.waiting.remove(turn)
        return granted

    def _release(self) -> None:
        """Free a slot; hand it to the longest-waiting search."""
        now = time.monotonic()
        if self.waiting:  # busy: the slot is taken again at once, so the gap measures throughput
            if self._busy_release is not None:
                gap = now - self._busy_release
                self.turnover_s = (
                    gap
                    if not self.turnover_s
                    else (1 - TURNOVER_WEIGHT) * self.turnover_s + TURNOVER_WEIGHT * gap
                )
            self._busy_release = now
        else:
            self._busy_release = None
        self.running -= 1
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                self.running += 1
                turn.set_result(True)
                return

    async def _refuse(self, send: Send, wait_s: float) -> None:
        retry = max(1, math.ceil(wait_s))
        body = json.dumps(
            {
                "detail": f"the service is at capacity: a search now would not be answered within "
                f"{self.limits.latency_s:g} s; retry after {retry} s"
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(retry).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
