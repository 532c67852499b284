"""How fast the image-folder pipeline makes batches on its own, without a model.

The report's input share (synthetic against real data, two sets of fresh processes) is the
answer users get; on a loaded machine its interval is wide. This times the pipeline alone,
in one process, so the question "could the input be the bottleneck?" has a direct figure:
the first pass (decoding every image with Pillow, resizing, caching as uint8) and the cached
passes after it (shuffle, stack, flip, scale), as ms per batch, median [IQR] over batches,
for each --flip setting in alternation (A B A B ...), --repeats passes each. Compare with the
model's step time at the same batch: a cached batch in 1 ms against a 40 ms step is at most
2.5% of it, before the worker threads overlap it with the step.

    python benchmarks/input_pipeline.py DIR [--batch-size 32] [--size 32] [--repeats 5]
    (DIR: an image folder; `mxbench data digits DIR` writes one)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mxbench.bench.model import data


def _pass(ds: object, batches: int) -> list[float]:
    out = []
    for i in range(batches):
        t0 = time.perf_counter()
        ds[i]  # type: ignore[index]
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def _fmt(ms: list[float]) -> str:
    q = np.percentile(ms, [25, 50, 75])
    return f"{q[1]:.3f} ms [{q[0]:.3f}–{q[2]:.3f}] (n={len(ms)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=32, help="height = width (px)")
    ap.add_argument("--repeats", type=int, default=5, help="cached passes per flip setting")
    args = ap.parse_args()
    flips = ("none", "both")
    sets = {f: data.image_folder(args.folder, args.batch_size, (args.size, args.size), flip=f,
                                 endless=False) for f in flips}  # fmt: skip
    n = len(sets["none"])
    for f in flips:
        first = _pass(sets[f], n)
        print(f"flip={f}: first pass (decode + resize + cache): {_fmt(first)} per batch, "
              f"{sum(first) / 1000:.2f} s for {n} batches")  # fmt: skip
    cached: dict[str, list[float]] = {f: [] for f in flips}
    for _ in range(args.repeats):
        for f in flips:  # alternating, so drift on a shared machine falls on both
            sets[f].on_epoch_end()
            cached[f] += _pass(sets[f], n)
    for f in flips:
        ms = cached[f]
        rate = args.batch_size * 1000.0 / statistics.median(ms)
        print(f"flip={f}: cached passes: {_fmt(ms)} per batch, {rate:,.0f} images/s on one thread")


if __name__ == "__main__":
    main()
