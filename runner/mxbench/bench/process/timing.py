"""Timing inside ``model.fit``: the timed steps as one window between two device syncs,
with a completion stamp per step, and the summary.

Method: one ``fit`` call runs the warm-up and the timed steps back to back. The callback is
``async_safe``: where the backend allows it (JAX, PyTorch), Keras hands its
``on_train_batch_end`` to worker threads, which turn the step's logs into Python floats
(waiting for that step, and only that step, to finish on the device) while the training loop
goes on dispatching the next steps, as Keras does with no callbacks at all. A callback that
waited on the device at every step would switch that asynchronous dispatch off and add the
host's latency to every step, pulling short steps' speedups toward 1.

- **The window** is the throughput's clock: it starts once every warm-up step has finished
  on the device (the first sync: ``on_train_batch_begin`` of the first timed step waits for
  the last warm-up step's completion) and ends when the last timed step's logs are ready
  (the second sync). ``window_s / steps`` is the sustained time per step.
- **Per-step stamps**, for diagnosis and the step statistics: the time each step's logs
  became ready, in completion order (steps finish in order on one device). Under
  asynchronous dispatch these are completions, not dispatch-to-completion latencies; on
  TensorFlow, whose Keras trainer is not thread-safe, batch ends stay synchronous and the
  two clocks agree. The first warm-up step is timed from ``on_train_batch_begin`` (it
  includes tracing/compilation/autotuning). ``benchmarks/timing_agreement.py`` checks both
  against a bare loop with no callbacks.

Keras reports ``loss`` as the running mean over the epoch; the loss of step ``k`` is
recovered exactly as ``(k + 1) * mean_k - k * mean_(k-1)``.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


def callback_base() -> Any:
    """Keras's ``Callback`` class, imported when first asked (this module loads without
    Keras): the base of the callbacks that time and hold ``fit``'s steps."""
    import keras

    return keras.callbacks.Callback


@dataclass
class StepLog:
    """Raw marks: when step 0 began, when each step had finished (in order), the
    running-mean loss after each step, and when the timed window began (after the sync
    that waits for the warm-up; None: no warm-up, the window begins with step 0)."""

    begin: float | None = None
    ends: list[float] = field(default_factory=list)
    mean_losses: list[float] = field(default_factory=list)
    window_start: float | None = None

    def step_loss(self, k: int) -> float:
        m = self.mean_losses
        return m[k] if k == 0 else (k + 1) * m[k] - k * m[k - 1]


def step_timer(
    log: StepLog, on_step: Callable[[int], None] | None = None, warmup_steps: int = 0
) -> Any:
    """A Keras callback filling ``log`` (complete once ``fit`` returns); ``on_step(k)``
    after each step's completion (progress display, called one at a time)."""
    done: dict[int, tuple[float, float]] = {}  # step -> (ready at, running-mean loss)
    warmed = threading.Event()
    lock = threading.Lock()
    if warmup_steps <= 0:
        warmed.set()

    class StepTimer(callback_base()):  # type: ignore[misc]
        async_safe = True  # batch ends may run on worker threads: no device sync per step

        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if log.begin is None:
                log.begin = time.perf_counter()
            if batch == warmup_steps and warmup_steps > 0:
                warmed.wait()  # the first sync: every warm-up step has finished
                log.window_start = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            ready = time.perf_counter()  # the logs are numbers: the step has finished
            loss = float((logs or {}).get("loss", float("nan")))
            with lock:
                done[batch] = (ready, loss)
                if batch == warmup_steps - 1:
                    warmed.set()
                if on_step is not None:
                    on_step(len(done))

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            # Keras has waited for every batch end by now (the second sync)
            log.ends = sorted(ready for ready, _ in done.values())
            log.mean_losses = [done[k][1] for k in sorted(done)]

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
    """Warm-up and timed parts of one fit: durations (s), the marks that bound them, and
    the timed window (s: from the sync after the warm-up to the last step's end)."""
    if log.begin is None or not log.ends:
        raise ValueError("no steps ran")
    marks = [log.begin, *log.ends]
    durations = [b - a for a, b in itertools.pairwise(marks)]
    start = log.window_start if log.window_start is not None else marks[warmup_steps]
    return {
        "first_step_s": durations[0],
        "warmup_s": marks[warmup_steps] - marks[0],
        "timed": durations[warmup_steps:],
        "first_timed_start": marks[warmup_steps],
        "window_s": marks[-1] - start,
    }


def window_figures(parts: dict[str, Any], batch: int, steps: int, spe: int, started_at: float,
                   flops: float | None) -> dict[str, Any]:  # fmt: skip
    """:func:`figures` of a fit's parts (:func:`split`): a step of ``spe`` per Keras call,
    ``batch`` a step's examples over every device, the start-up since ``started_at`` (wall
    clock)."""
    wall_minus_perf = time.time() - time.perf_counter()
    return figures(
        [d / spe for d in parts["timed"]], batch * steps, parts["window_s"],
        parts["first_step_s"], parts["warmup_s"],
        parts["first_timed_start"] + wall_minus_perf - started_at, flops,
    )  # fmt: skip


def figures(step_s: list[float], examples: int, window_s: float, first_s: float,
            warmup_s: float, startup_s: float, flops: float | None) -> dict[str, Any]:  # fmt: skip
    """The metrics a measurement's timings give: the step statistics (each timed step's
    seconds), images/s sustained over the timed ``window_s`` (``examples`` in it), the first
    step's and the whole warm-up's seconds, the seconds from the process's start to the
    first timed step, and the achieved TFLOP/s (``flops`` per example; None: not known)."""
    images_per_s = examples / window_s
    return {
        "step_ms": summarize(step_s),
        "images_per_s": round(images_per_s, 3),
        "first_step_ms": round(first_s * 1000.0, 3),
        "warmup_ms": round(warmup_s * 1000.0, 3),
        "startup_s": round(startup_s, 3),
        "achieved_tflops": round(flops * images_per_s / 1e12, 6) if flops else None,
    }


# Where a cell process's wall time goes, in order (the record's ``metrics.phases_s``).
PHASES = {
    "start": "process start -> the cell begins (interpreter, importing mxbench)",
    "roofs": (
        "the device's roofs: the roofs cache, or a quick probe once per host and stack "
        "(mxbench.bench.evidence.roofline)"
    ),
    "import": "importing the framework and Keras",
    "build": "building and compiling the model (harness: float32 build, weights copied)",
    "data": "making the input pipeline",
    "facts": "the model facts (layer walk; XLA cost analysis under JAX)",
    "first_step": "the first warm-up step (tracing, compilation, autotuning)",
    "warmup": "the other warm-up steps",
    "timed": "the timed window",
    "fit_other": "the rest of fit (its setup, waiting on batch-end callbacks)",
    "probe": "probing CPU, device, GPU utilisation and memory",
    "profile": "the profiled window after the timed steps (first process of a cell)",
    "check": (
        "the one-step check against float32 (mxbench.bench.model.convergence; 16-bit policies)"
    ),
}


class Phases:
    """Stamps of a cell process's phases: :meth:`mark` books the time since the last mark
    under a phase (adding up when a phase comes twice)."""

    def __init__(self, process_start: float | None) -> None:
        self.out: dict[str, float] = {}
        if process_start is not None:
            self.out["start"] = max(0.0, time.time() - process_start)
        self.last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.out[name] = self.out.get(name, 0.0) + now - self.last
        self.last = now

    def fit(self, parts: dict[str, Any]) -> None:
        """Book the ``fit`` call just ended (since the last mark) as its parts (:func:`split`)."""
        now = time.perf_counter()
        total = now - self.last
        first, warm = parts["first_step_s"], parts["warmup_s"] - parts["first_step_s"]
        timed = parts["window_s"]
        for name, value in (("first_step", first), ("warmup", warm), ("timed", timed)):
            self.out[name] = value
        self.out["fit_other"] = max(0.0, total - first - warm - timed)
        self.last = now

    def done(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.out.items()}
