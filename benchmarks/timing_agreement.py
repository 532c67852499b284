"""Does mxbench's timing agree with an independent bare loop, with and without a device
sync at every step?

Alternates, in one process on the same data and backend (--backend), --rounds times:
(a) mxbench's own measurement of a cell (``mxbench.bench.process.cell.run_cell``): ms per step from
the timed window between two device syncs (what images/s comes from), and the median of
the per-step completion stamps; (b) the same cell timed the way mxbench did up to Step 12:
a callback that is not ``async_safe`` (a copy is kept below), so Keras turns every step's
logs into floats on the training thread, syncing with the device at every step; (c) a bare
loop: a fresh copy of the published model trained by ``train_on_batch`` in a Python loop
on the batch placed once on the device, no ``fit`` and no callbacks, timed by a wall clock
(:func:`bare_loop_ms`). With ``--fits N``: one model, alternating fits with no callback,
with mxbench's timer and with the synced timer (:func:`fit_ab`). Prints every
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

from mxbench.bench.process import cell, timing
from mxbench.matrix.params import Params

from mxbench.bench.params import validate


def synced_timer(log: timing.StepLog, on_step: Any = None, warmup_steps: int = 0) -> Any:
    """The Step 12 callback: batch ends on the training thread, a device sync per step."""

    class SyncedTimer(timing.callback_base()):  # type: ignore[misc]
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


def _source(backend: str, batch: Any) -> Any:
    """The cell's input: TensorFlow, tf.data from one host batch; JAX / PyTorch, the batch
    placed once on the device."""
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.data.Dataset.from_tensors(batch).repeat()
    from mxbench.bench.model import data

    return data.device_batch(*batch)[0]


def bare_loop_ms(p: Params, times: int = 3) -> float:
    """Mean ms per step of a plain Python loop of ``train_on_batch`` on the cell's batch,
    placed once on the device (``keras.ops.convert_to_tensor``): no ``fit``, no callbacks,
    no epoch iterator. A wall clock around ``p.steps`` calls after ``p.warmup_steps``, the
    median of ``times`` such windows. Each call returns its logs as numbers (a sync per
    step: on a CPU the steps run synchronously anyway). Not ``fit``: on this 2-core VM a
    TensorFlow ``fit`` of a second or two often ends only at a fixed ~2.55 s tick, a stall
    after its last step that a wall clock around ``fit`` counts and mxbench's window (the
    steps' own stamps) does not (``--fits`` shows it)."""
    import keras
    from mxbench.bench.model import harness
    from mxbench.bench.model.harness import set_policy

    prepared = harness.prepare(p, set_policy)  # the cell's model, weights and loss
    harness.compile_model(prepared, p.jit_compile)
    model = prepared.model
    x, y = (keras.ops.convert_to_tensor(a) for a in harness.synthetic_batch(prepared, p))
    for _ in range(max(p.warmup_steps, 1)):
        model.train_on_batch(x, y)
    windows = []
    for _ in range(times):
        t0 = time.perf_counter()
        for _ in range(p.steps):
            model.train_on_batch(x, y)
        windows.append((time.perf_counter() - t0) * 1000.0 / p.steps)
    return statistics.median(windows)


def _lower_mode(values: list[float]) -> list[float]:
    """The values below the widest gap of the sorted values when that gap is over 15% of
    the value under it (a machine whose fits run at one of two speeds), else all."""
    srt = sorted(values)
    gaps = [(b - a, i) for i, (a, b) in enumerate(itertools.pairwise(srt)) if b - a > 0.15 * a]
    return srt[: max(gaps)[1] + 1] if gaps else srt


def fit_ab(p: Params, fits: int) -> None:
    """One model, ``fits`` rounds of three fits alternating (``p.warmup_steps`` +
    ``p.steps`` steps each): no callback (the fit's wall clock), mxbench's own timer (its
    window clock and the fit's wall clock), and the per-step-synced timer of Step 12. Every
    fit's ms per step, then medians over all fits and over the faster mode's fits."""
    from mxbench.bench.model import harness
    from mxbench.bench.model.harness import set_policy

    prepared = harness.prepare(p, set_policy)
    harness.compile_model(prepared, p.jit_compile)
    model = prepared.model
    ds = _source(p.backend, harness.synthetic_batch(prepared, p))
    total = p.warmup_steps + p.steps
    fit = {"epochs": 1, "verbose": 0, "shuffle": False, "steps_per_epoch": total}
    model.fit(ds, **{**fit, "steps_per_epoch": max(p.warmup_steps, 1)})
    cols = ("no callback wall", "mxbench window", "mxbench wall", "synced wall")
    got: dict[str, list[float]] = {c: [] for c in cols}
    print(f"fit A/B: {fits} rounds of 3 fits ({total} steps each), ms per step")
    print(" ".join(f"{c:>17}" for c in cols))
    for _ in range(fits):
        t0 = time.perf_counter()
        model.fit(ds, **fit)
        got["no callback wall"].append((time.perf_counter() - t0) * 1000 / total)
        log = timing.StepLog()
        t0 = time.perf_counter()
        model.fit(ds, **fit, callbacks=[timing.step_timer(log, None, p.warmup_steps)])
        got["mxbench wall"].append((time.perf_counter() - t0) * 1000 / total)
        parts = timing.split(log, p.warmup_steps)
        window = log.ends[-1] - parts["first_timed_start"]
        got["mxbench window"].append(window * 1000 / p.steps)
        t0 = time.perf_counter()
        model.fit(ds, **fit, callbacks=[synced_timer(timing.StepLog())])
        got["synced wall"].append((time.perf_counter() - t0) * 1000 / total)
        print(" ".join(f"{got[c][-1]:>17.2f}" for c in cols), flush=True)
    for name, pick in (("all fits", list), ("faster mode", _lower_mode)):
        mids = {c: statistics.median(pick(v)) for c, v in got.items()}
        counts = "/".join(str(len(pick(v))) for v in got.values())
        print(" ".join(f"{mids[c]:>17.2f}" for c in cols) + f"  median, {name} ({counts})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="float32")
    ap.add_argument("--backend", default="tensorflow", choices=["tensorflow", "jax", "torch"])
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--fits", type=int, default=0,
                    help="instead: N rounds of alternating fits of one model (fit_ab)")  # fmt: skip
    a = ap.parse_args(argv)
    p = validate(
        Params(policy=a.policy, batch_size=a.batch_size, image_size=a.image_size,
               steps=a.steps, warmup_steps=a.warmup_steps, jit_compile="auto",
               backend=a.backend)
    )  # fmt: skip
    if a.fits:
        fit_ab(p, a.fits)
        return 0
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
