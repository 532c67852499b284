"""Does the scaling map's interval hold its level? A simulation with a known truth.

The map prints each slot's images/s as the median over its processes of their window
images/s, and the efficiency (or the share of independent replicas kept) as the ratio of two
such figures (``mxbench/report/sections/throughput.py``). Here each side has K processes whose log
images/s are the truth plus a process effect of SD --process-sd (the drift study's 0.05-0.09)
and, with --stray, windows whose steps are 3x slow with that probability (what a median step
leaves out and a window counts). For each K and SD it prints, over --trials tables, how often
the interval holds the truth (the ratio of the two sides' population medians, from 200,000
simulated processes):

- **after**: ``throughput.ratio``, Welch's t around the printed ratio, each side's variance
  pi/2 times larger from three processes on (a median's);
- **no factor**: the same interval without that factor (what centring on the medians costs);
- **mean-centred**: Welch's t around the ratio of geometric means (not the printed figure).

    python benchmarks/scaling_interval.py [--trials 4000] [--stray 0.1]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np
from mxbench.report.sections import throughput
from scipy.special import stdtrit


def welch(num: np.ndarray, den: np.ndarray, centre: float, factor: bool) -> tuple[float, float]:
    """Welch's t interval of the log ratio around ``centre`` (a ratio)."""
    sides = []
    for logs in (num, den):
        k = len(logs)
        sides.append(
            (float(np.var(logs, ddof=1)) / k * (math.pi / 2 if factor and k >= 3 else 1), k)
        )
    (a, ka), (b, kb) = sides
    df = (a + b) ** 2 / (a * a / (ka - 1) + b * b / (kb - 1))
    half = float(stdtrit(df, 0.975)) * math.sqrt(a + b)
    return centre * math.exp(-half), centre * math.exp(half)


def rates(rng: np.random.Generator, n: int, level: float, sd: float, stray: float) -> np.ndarray:
    """``n`` processes' window images/s: 40 steps of ``level`` ms with a process effect,
    ``stray`` of them 3x slow."""
    steps = level * np.exp(rng.normal(0, sd, (n, 1))) * np.where(rng.random((n, 40)) < stray, 3, 1)
    return 32 * 40 * 1000 / steps.sum(axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--stray", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=48)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"trials {args.trials} a cell, stray steps {args.stray:.0%}: the share of intervals "
          "holding the truth (95% asked)\n")  # fmt: skip
    print("| process SD | K a side | after | no factor | mean-centred |")
    print("|---:|---:|---:|---:|---:|")
    for sd in (0.05, 0.07, 0.09):
        truth = float(
            np.median(rates(rng, 200_000, 125.0, sd, args.stray))
            / (2 * np.median(rates(rng, 200_000, 100.0, sd, args.stray)))
        )
        for k in (2, 3, 4, 5, 6):
            held = {"after": 0, "no factor": 0, "mean-centred": 0}
            for _ in range(args.trials):
                num, den = (
                    rates(rng, k, 125.0, sd, args.stray),
                    rates(rng, k, 100.0, sd, args.stray),
                )
                value = statistics.median(num) / (2 * statistics.median(den))
                r = throughput.ratio([(x, 0.0) for x in num], [(x, 0.0) for x in den], value)
                held["after"] += r.low <= truth <= r.high
                ln, ld = np.log(num), np.log(den)
                low, high = welch(ln, ld, value, factor=False)
                held["no factor"] += low <= truth <= high
                gm = math.exp(float(ln.mean() - ld.mean())) / 2
                low, high = welch(ln, ld, gm, factor=False)
                held["mean-centred"] += low <= truth <= high
            cells = " | ".join(f"{v / args.trials:.1%}" for v in held.values())
            print(f"| {sd} | {k} | {cells} |")


if __name__ == "__main__":
    main()
