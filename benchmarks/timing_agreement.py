"""Does mxbench's timing agree with an independent bare loop, with and without a device
sync at every step?

Alternates, in one process on the same data and backend (--backend), --rounds times:
(a) mxbench's own measurement of a cell (``mxbench.bench.cell.run_cell``): ms per step from
the timed window between two device syncs (what images/s comes from), and the median of
the per-step completion stamps; (b) the same cell timed the way mxbench did up to Step 12:
a callback that is not ``async_safe`` (a copy is kept below), so Keras turns every step's
logs into floats on the training thread, syncing with the device at every step; (c) a bare
loop: a fresh copy of the published model trained by ``fit`` with no callbacks at all,
fits of several lengths timed by a wall clock, ms per step the slope of time against steps
(:func:`bare_loop_ms`). Prints every
round, the medians over rounds and each clock's difference from the bare loop of the same
round (median over rounds with its IQR; target: within 3%). On a CPU the backends run
steps nearly synchronously anyway; on a GPU, short steps show what per-step syncing costs.

    .venv/bin/python benchmarks/timing_agreement.py --image-size 128 --batch-size 16 \
        --steps 10 --rounds 4 [--backend jax]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from typing import Any

from mxbench.bench import cell, timing
from mxbench.bench.params import validate
from mxbench.params import Params


def synced_timer(log: timing.StepLog, on_step: Any = None, warmup_steps: int = 0) -> Any:
    """The Step 12 callback: batch ends on the training thread, a device sync per step."""

    class SyncedTimer(timing._callback_base()):  # type: ignore[misc]
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if log.begin is None:
                log.begin = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            log.ends.append(time.perf_counter())
            log.mean_losses.append(float((logs or {}).get("loss", float("nan"))))

    return SyncedTimer()


def cell_ms(p: Params, synced: bool) -> tuple[float, float]:
    """(ms per step over the timed window, median ms of the per-step stamps) of one cell."""
    cell.step_timer = synced_timer if synced else timing.step_timer  # type: ignore[assignment]
    rec = cell.run_cell(p)
    s, rate = rec.step, rec.metrics.images_per_s
    if s is None or s.median is None or not rate:
        raise SystemExit(f"mxbench cell failed: {rec.status}: {rec.error}")
    return p.batch_size * 1000.0 / rate, s.median


def bare_loop_ms(p: Params, sizes: tuple[int, ...] = (1, 2, 3), times: int = 2) -> float:
    """Mean ms per step of a fit with no callbacks, on the input the cell uses (TensorFlow:
    tf.data from one host batch; JAX / PyTorch: the batch placed once on the device): the
    slope of a fit's wall time against its number of steps. Fits of ``n * p.steps`` steps
    for each n in ``sizes``, ``times`` each in alternating order, after ``p.warmup_steps``;
    the slope is the median of the slopes between every two fits of different lengths
    (Theil-Sen), so a fit call's own cost (its iterator, callbacks, last logs) falls in the
    intercept and one slow fit cannot move it."""
    from mxbench.bench import data
    from mxbench.bench import model as harness
    from mxbench.bench.cell import set_policy

    prepared = harness.prepare(p, set_policy)  # the cell's model, weights and loss
    harness.compile_model(prepared, p.jit_compile)
    model = prepared.model
    batch = harness.synthetic_batch(prepared, p)
    if p.backend == "tensorflow":
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensors(batch).repeat()
    else:
        ds, _ = data.device_batch(*batch)
    fit = {"epochs": 1, "verbose": 0, "shuffle": False}  # shuffling an endless source: OOM
    model.fit(ds, steps_per_epoch=max(p.warmup_steps, 1), **fit)
    points: list[tuple[int, float]] = []
    for k in range(times):  # fit returns after its last step's logs are on host
        for n in sizes if k % 2 == 0 else reversed(sizes):
            t0 = time.perf_counter()
            hist = model.fit(ds, steps_per_epoch=n * p.steps, **fit)
            points.append((n * p.steps, time.perf_counter() - t0))
            assert len(hist.history["loss"]) == 1
    slopes = [(tb - ta) / (nb - na) for (na, ta), (nb, tb) in itertools.combinations(points, 2)
              if nb != na]  # fmt: skip
    return statistics.median(slopes) * 1000.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="float32")
    ap.add_argument("--backend", default="tensorflow", choices=["tensorflow", "jax", "torch"])
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args(argv)
    p = validate(
        Params(policy=a.policy, batch_size=a.batch_size, image_size=a.image_size,
               steps=a.steps, warmup_steps=a.warmup_steps, jit_compile="auto",
               backend=a.backend)
    )  # fmt: skip
    cols = ("window", "stamps median", "synced window", "synced median", "bare loop")
    got: dict[str, list[float]] = {c: [] for c in cols}
    print(f"{p.backend} {p.policy} batch {p.batch_size} {p.image_size}px, {p.steps} timed "
          f"steps, {a.rounds} rounds (alternating), ms per step", flush=True)  # fmt: skip
    print(f"{'round':>5} " + " ".join(f"{c:>14}" for c in cols))
    for r in range(a.rounds):
        measured = (*cell_ms(p, synced=False), *cell_ms(p, synced=True), bare_loop_ms(p))
        for c, value in zip(cols, measured, strict=True):
            got[c].append(value)
        print(f"{r:>5} " + " ".join(f"{got[c][-1]:>14.2f}" for c in cols), flush=True)
    mid = {c: statistics.median(v) for c, v in got.items()}
    print(f"{'median':>5} " + " ".join(f"{mid[c]:>14.2f}" for c in cols))
    # paired per round (each clock against the bare loop of its own round): the machine's
    # drift between rounds cancels, what is left is the clocks' disagreement
    paired: dict[str, float] = {}
    for c in cols[:-1]:
        diffs = [100.0 * (x - b) / b for x, b in zip(got[c], got["bare loop"], strict=True)]
        q1, med, q3 = (statistics.quantiles(diffs, n=4, method="inclusive")
                       if len(diffs) > 1 else [diffs[0]] * 3)  # fmt: skip
        paired[c] = med
        print(
            f"{c} vs bare loop, per round: median {med:+.2f}% [IQR {q1:+.2f}% to {q3:+.2f}%], "
            f"range {min(diffs):+.2f}% to {max(diffs):+.2f}%"
        )
    ok = abs(paired["window"]) <= 3.0
    print(f"window {'within' if ok else 'OUTSIDE'} 3% of the bare loop (median of the rounds)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
