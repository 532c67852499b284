"""An independent reference for the speedup: a plain Keras training loop, no mxbench.

Rounds of two fresh processes, one per policy, in a random order per round; each builds the
experiment's CNN (mxbench.models.blog_cnn's layers, written out here so that nothing of the
harness is shared), trains on one synthetic batch with ``train_on_batch`` after a warm-up,
and prints its median step time for each batch size. The speedup of a round is float32's
median over the policy's; the reference is the median over rounds (with their min-max).
Run it on a quiet machine: it is the truth the paired design's answers are held against.

    python benchmarks/reference_loop.py [--rounds 6] [--batches 8 32] [--size 64]
        [--steps 60] [--policy mixed_bfloat16]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import numpy as np
import keras
from keras import layers
policy, size, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
batches = [int(b) for b in sys.argv[4].split(",")]
keras.config.set_dtype_policy(policy)
out = {}
for batch in batches:
    keras.utils.set_random_seed(0)
    stack = [keras.Input((size, size, 3))]
    for filters, kernel in ((32, 5), (64, 7), (128, 11)):  # the blog's CNN, written out
        stack.append(layers.Conv2D(filters, kernel, strides=2, padding="same",
                                   activation="relu"))
        stack.append(layers.BatchNormalization())
    stack += [layers.GlobalAveragePooling2D(), layers.Dense(10),
              layers.Activation("softmax", dtype="float32")]
    model = keras.Sequential(stack)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    xb = rng.random((batch, size, size, 3), dtype=np.float32)
    yb = rng.integers(0, 10, batch)
    for _ in range(3):
        model.train_on_batch(xb, yb)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        model.train_on_batch(xb, yb)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    out[batch] = times[len(times) // 2]
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--policy", default="mixed_bfloat16")
    args = ap.parse_args()
    rng = random.Random()
    ratios: dict[int, list[float]] = {b: [] for b in args.batches}
    for r in range(args.rounds):
        order = ["float32", args.policy]
        rng.shuffle(order)
        got = {}
        for policy in order:
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, policy, str(args.size), str(args.steps),
                 ",".join(map(str, args.batches))],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            got[policy] = {int(k): v for k, v in json.loads(proc.stdout.splitlines()[-1]).items()}
        for b in args.batches:
            ratios[b].append(got["float32"][b] / got[args.policy][b])
        said = ", ".join(f"batch {b} {ratios[b][-1]:.3f}x" for b in args.batches)
        print(f"round {r + 1} ({' '.join(order)}): {said}", flush=True)
    for b in args.batches:
        xs = ratios[b]
        print(f"reference batch {b}: {args.policy} {statistics.median(xs):.3f}x "
              f"[{min(xs):.3f}-{max(xs):.3f}] over {len(xs)} rounds")  # fmt: skip


if __name__ == "__main__":
    main()
