"""Does mxbench's per-step median agree with an independent bare timing loop?

Alternates, in one process on the same data, (a) mxbench's own measurement of a cell
(``mxbench.bench.cell.run_cell``: fit with the per-step timing callback, median of the
timed steps) and (b) a bare loop: a fresh copy of the published model trained by ``fit``
with no callbacks at all (so Keras never syncs per step), timed by one wall clock around
the timed steps, divided by their number. Prints every round, the median over rounds of
each, and the difference in percent (target: within 3%).

    .venv/bin/python benchmarks/timing_agreement.py --image-size 128 --batch-size 16 \
        --steps 10 --rounds 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from mxbench.bench.cell import run_cell
from mxbench.bench.params import validate
from mxbench.params import Params


def bare_loop_ms(p: Params) -> float:
    """Mean ms per step of ``p.steps`` steps after ``p.warmup_steps``, no callbacks."""
    import keras
    import numpy as np
    import tensorflow as tf

    from mxbench.bench.model import build_model

    keras.config.set_dtype_policy(p.policy)
    model = build_model(p.image_size)
    model.compile(loss="sparse_categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    rng = np.random.default_rng(0)
    x = rng.random((p.batch_size, p.image_size, p.image_size, 3), dtype=np.float32)
    y = rng.integers(0, 10, size=(p.batch_size,), dtype=np.int32)
    ds = tf.data.Dataset.from_tensors((x, y)).repeat()
    model.fit(ds, epochs=1, steps_per_epoch=max(p.warmup_steps, 1), verbose=0)
    t0 = time.perf_counter()
    hist = model.fit(ds, epochs=1, steps_per_epoch=p.steps, verbose=0)
    elapsed = time.perf_counter() - t0  # fit returns after its last step's logs are on host
    assert len(hist.history["loss"]) == 1
    return elapsed * 1000.0 / p.steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="float32")
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args(argv)
    p = validate(
        Params(policy=a.policy, batch_size=a.batch_size, image_size=a.image_size,
                    steps=a.steps, warmup_steps=a.warmup_steps, jit_compile="auto")
    )  # fmt: skip
    mx: list[float] = []
    mx_mean: list[float] = []
    bare: list[float] = []
    print(f"{p.policy} batch {p.batch_size} {p.image_size}px, {p.steps} timed steps, "
          f"{a.rounds} rounds (alternating)", flush=True)  # fmt: skip
    print(f"{'round':>5} {'mxbench median':>15} {'mxbench mean':>13} {'bare loop':>10}")
    for r in range(a.rounds):
        rec = run_cell(p)
        s = rec.step
        if s is None or s.median is None or s.mean is None:
            print(f"mxbench cell failed: {rec.status}: {rec.error}", file=sys.stderr)
            return 1
        mx.append(s.median)
        mx_mean.append(s.mean)
        bare.append(bare_loop_ms(p))
        print(f"{r:>5} {mx[-1]:>15.2f} {mx_mean[-1]:>13.2f} {bare[-1]:>10.2f}", flush=True)
    m_mx, m_mean, m_bare = (statistics.median(v) for v in (mx, mx_mean, bare))
    diff = 100.0 * (m_mx - m_bare) / m_bare
    print(f"median over rounds: mxbench median {m_mx:.2f} ms, mxbench mean {m_mean:.2f} ms, "
          f"bare loop {m_bare:.2f} ms/step")  # fmt: skip
    print(f"difference mxbench median vs bare loop: {diff:+.2f}% "
          f"({'within' if abs(diff) <= 3 else 'OUTSIDE'} 3%)")  # fmt: skip
    return 0 if abs(diff) <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
