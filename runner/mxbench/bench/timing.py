"""Per-step timing inside ``model.fit`` and its summary.

Method: one ``fit`` call runs the warm-up and the timed steps back to back. A callback
with ``on_train_batch_end`` makes Keras 3 dispatch batch callbacks synchronously and turn
the step's logs into Python floats, which waits for the step to finish on the device. So
the interval between two consecutive batch ends is exactly one whole step (input, forward,
backward, update, sync), with no gap between steps left out. The first warm-up step is
timed from ``on_train_batch_begin`` (it includes tracing/compilation/autotuning).
``benchmarks/timing_agreement.py`` checks this against a bare loop with no callbacks.

Keras reports ``loss`` as the running mean over the epoch; the loss of step ``k`` is
recovered exactly as ``(k + 1) * mean_k - k * mean_(k-1)``.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


def _callback_base() -> Any:
    import keras

    return keras.callbacks.Callback


@dataclass
class StepLog:
    """Raw marks: when step 0 began, when each step ended, the running-mean loss then."""

    begin: float | None = None
    ends: list[float] = field(default_factory=list)
    mean_losses: list[float] = field(default_factory=list)

    def step_loss(self, k: int) -> float:
        m = self.mean_losses
        return m[k] if k == 0 else (k + 1) * m[k] - k * m[k - 1]


def step_timer(log: StepLog, on_step: Callable[[int], None] | None = None) -> Any:
    """A Keras callback filling ``log``; ``on_step(k)`` after each step (progress display)."""

    class StepTimer(_callback_base()):  # type: ignore[misc]
        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if log.begin is None:
                log.begin = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            log.ends.append(time.perf_counter())
            log.mean_losses.append(float((logs or {}).get("loss", float("nan"))))
            if on_step is not None:
                on_step(len(log.ends))

    return StepTimer()


def summarize(durations_s: Sequence[float]) -> dict[str, Any]:
    """Median, quartiles, mean, min, max (ms), n, and every timed step's time (ms, in
    order: the raw samples any other statistic can be recomputed from)."""
    ms = [d * 1000.0 for d in durations_s]
    if not ms:
        raise ValueError("no timed steps")
    if len(ms) > 1:
        p25, _, p75 = statistics.quantiles(ms, n=4, method="inclusive")
    else:
        p25 = p75 = ms[0]
    return {
        "median": round(statistics.median(ms), 4),
        "p25": round(p25, 4),
        "p75": round(p75, 4),
        "mean": round(statistics.fmean(ms), 4),
        "min": round(min(ms), 4),
        "max": round(max(ms), 4),
        "n": len(ms),
        "samples": [round(x, 4) for x in ms],
    }


def split(log: StepLog, warmup_steps: int) -> dict[str, Any]:
    """Warm-up and timed parts of one fit: durations (s) and the marks that bound them."""
    if log.begin is None or not log.ends:
        raise ValueError("no steps ran")
    marks = [log.begin, *log.ends]
    durations = [b - a for a, b in itertools.pairwise(marks)]
    return {
        "first_step_s": durations[0],
        "warmup_s": marks[warmup_steps] - marks[0],
        "timed": durations[warmup_steps:],
        "first_timed_start": marks[warmup_steps],
    }
