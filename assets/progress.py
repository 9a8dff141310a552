"""Progress inside a long step: counts, rate and time left in the step's Dagster log, which the UI shows
and `chunkyard index` prints while the step runs (`orchestration.progress`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

PROGRESS_PREFIX = "progress: "
PROGRESS_INTERVAL_S = 2.0  # a line every 2 s at most, or every batch when batches take longer


def step_progress(
    log: Any, unit: str, done_what: str, interval: float = PROGRESS_INTERVAL_S
) -> Callable[[int, int], None]:
    """A `progress(done, total)` callback for a long step: at most every `interval` seconds (and at the
    end) one line with counts, rate and time left (tqdm's meter) to the step's Dagster log, which the
    UI shows and `chunkyard index` prints while the step runs."""
    from tqdm import tqdm

    started = time.monotonic()
    shown = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == 0 < total or (done < total and now - shown[0] < interval):
            return  # nothing done yet has no rate or time left to show
        shown[0] = now
        meter = tqdm.format_meter(
            done,
            total,
            now - started,
            unit=unit,
            bar_format=f"{{n_fmt}}/{{total_fmt}} {unit} {done_what}, {{rate_fmt}}, {{remaining}} left",
        )
        log.info(PROGRESS_PREFIX + " ".join(meter.split()))  # tqdm pads its rate for a bar

    return report
