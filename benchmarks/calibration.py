"""Do the speedup intervals hold their level? A simulation with a known truth.

Each simulated process has its own level (log-normal, sd --process-sd, 5 % by default: clock
boost, shared cores, autotuned kernels, memory placement) and autocorrelated steps (AR(1) of
lag-1 correlation --phi, marginal sd --step-sd). Two policies are timed with K processes
each, for K in --repeats. For each K it prints, over --trials simulated comparisons:

- A/A (identical policies): how often a method says *faster* or *slower* (target: at most
  5 %), and how often its interval covers the truth, 1.0 (target: about 95 %);
- a real 1.3× speedup: how often it says *faster* (target: almost always at K = 5).

Methods: **before**, the interval mxbench printed up to Step 12 (a copy of that function is
kept below, for this comparison only: percentile bootstrap of the median over pooled steps
below 3 processes, over the processes' medians from 3); **hier. bootstrap**, a hierarchical
percentile bootstrap (processes with replacement, then moving blocks of steps within each,
block length from the data: what resampling alone gives); **after**, ``mxbench.stats``
(within-process variance from the steps and their autocorrelation, Welch's t over processes,
no verdict with one process a side).

    python benchmarks/calibration.py [--trials 1000] [--steps 50] [--phi 0.5]
        [--slow-share 0.2 --slow-by 0.1]   # bimodal process levels: a robustness check
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from functools import cache

import numpy as np

from mxbench import stats

# --- "before": mxbench.stats.speedups as of Step 12, kept here only to compare -------------
_OLD_MIN_REPEATS, _OLD_RESAMPLES, _OLD_SEED = 3, 1000, 20200113
_OLD_TAILS = (int(_OLD_RESAMPLES * 0.025), int(_OLD_RESAMPLES * 0.975) - 1)


@cache
def _old_middle_ranks(n: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng((_OLD_SEED, n, side))
    idx = np.sort(rng.integers(0, n, size=(_OLD_RESAMPLES, n)), axis=1)
    return idx[:, (n - 1) // 2], idx[:, n // 2]


def _old_boot(sorted_rows: np.ndarray, n: int, side: int) -> np.ndarray:
    k1, k2 = _old_middle_ranks(n, side)
    out: np.ndarray = (sorted_rows[:, k1] + sorted_rows[:, k2]) / 2
    return out


def old_intervals(pairs: Sequence[tuple[list[np.ndarray], list[np.ndarray]]]) -> np.ndarray:
    """(low, high) per pair, as mxbench computed them before: all pairs share their sizes."""
    b0, o0 = pairs[0]
    if min(len(b0), len(o0)) >= _OLD_MIN_REPEATS:  # over the processes' medians
        xb = np.array([[np.median(r) for r in b] for b, _ in pairs])
        xo = np.array([[np.median(r) for r in o] for _, o in pairs])
    else:  # over the pooled steps
        xb = np.array([np.concatenate(b) for b, _ in pairs])
        xo = np.array([np.concatenate(o) for _, o in pairs])
    xb, xo = np.sort(xb, axis=1), np.sort(xo, axis=1)
    ratio = _old_boot(xb, xb.shape[1], 0) / _old_boot(xo, xo.shape[1], 1)
    part = np.partition(ratio, list(_OLD_TAILS), axis=1)
    return np.stack([part[:, _OLD_TAILS[0]], part[:, _OLD_TAILS[1]]], axis=1)


# --- a hierarchical percentile bootstrap: processes, then blocks of steps -----------------
def _block_length(x: np.ndarray) -> int:
    """Carlstein's rule for AR(1) data: (√6·ρ/(1-ρ²))^(2/3)·n^(1/3), at least 1."""
    c = x - x.mean()
    rho = float(np.clip((c[1:] * c[:-1]).sum() / max((c * c).sum(), 1e-300), 0.0, 0.95))
    return max(1, round((6**0.5 * rho / (1 - rho**2)) ** (2 / 3) * len(x) ** (1 / 3)))


def _hier_side(rng: np.random.Generator, side: list[np.ndarray], resamples: int) -> np.ndarray:
    """Mean log median of ``resamples`` hierarchical resamples of one side."""
    logs = [np.log(r) for r in side]
    k = len(logs)
    boot = np.empty((resamples, k))
    for i, x in enumerate(logs):  # every process's block-bootstrap medians, drawn once
        n, ln = len(x), _block_length(x)
        starts = rng.integers(0, n - ln + 1, size=(resamples, -(-n // ln)))
        idx = (starts[:, :, None] + np.arange(ln)).reshape(resamples, -1)[:, :n]
        boot[:, i] = np.median(x[idx], axis=1)
    pick = rng.integers(0, k, size=(resamples, k))  # processes with replacement
    out: np.ndarray = np.take_along_axis(boot, pick, axis=1).mean(axis=1)
    return out


def hier_interval(rng: np.random.Generator, b: list[np.ndarray], o: list[np.ndarray],
                  resamples: int = 400) -> tuple[float, float]:  # fmt: skip
    d = np.exp(_hier_side(rng, b, resamples) - _hier_side(rng, o, resamples))
    lo, hi = np.quantile(d, [0.025, 0.975])
    return float(lo), float(hi)


# --- the simulation -------------------------------------------------------------------------
def process(
    rng: np.random.Generator, level: float, steps: int, phi: float, sd: float
) -> np.ndarray:
    """One process's step times (ms): its level times AR(1) log-noise of marginal sd ``sd``."""
    z = rng.normal(0.0, sd * (1 - phi**2) ** 0.5, steps)
    e = np.empty(steps)
    e[0] = rng.normal(0.0, sd)
    for t in range(1, steps):
        e[t] = phi * e[t - 1] + z[t]
    out: np.ndarray = level * np.exp(e)
    return out


def side(
    rng: np.random.Generator, k: int, mean_ms: float, a: argparse.Namespace
) -> list[np.ndarray]:
    def level() -> float:  # log-normal, and with --slow-share a slow mode on top
        slow = 1.0 + a.slow_by if rng.random() < a.slow_share else 1.0
        return mean_ms * slow * float(np.exp(rng.normal(0.0, a.process_sd)))

    return [process(rng, level(), a.steps, a.phi, a.step_sd) for _ in range(k)]


def _rates(lo_hi: np.ndarray, truth: float) -> tuple[float, float]:
    """(share of intervals excluding 1.0, share covering the truth) of rows (low, high)."""
    lo, hi = lo_hi[:, 0], lo_hi[:, 1]
    return float(np.mean((lo > 1) | (hi < 1))), float(np.mean((lo <= truth) & (truth <= hi)))


def evaluate(
    rng: np.random.Generator, k: int, truth: float, a: argparse.Namespace
) -> dict[str, tuple[float, float]]:
    """Per method: (share of 'faster' or 'slower' verdicts, share of intervals covering
    the truth)."""
    pairs = [(side(rng, k, 100.0, a), side(rng, k, 100.0 / truth, a)) for _ in range(a.trials)]
    out: dict[str, tuple[float, float]] = {}
    out["before"] = _rates(old_intervals(pairs), truth)
    n_hier = min(a.trials, a.hier_trials)
    out["hier. bootstrap"] = _rates(
        np.array([hier_interval(rng, b, o) for b, o in pairs[:n_hier]]), truth
    )
    new = [
        r
        for r in stats.speedups([([list(x) for x in b], [list(x) for x in o]) for b, o in pairs])
        if r
    ]
    decided = [r.verdict in (stats.FASTER, stats.SLOWER) for r in new]
    covered = [r.low <= truth <= r.high for r in new]
    out["after"] = (float(np.mean(decided)), float(np.mean(covered)))
    out["after: withheld"] = (
        float(np.mean([r.verdict == stats.TOO_FEW for r in new])),
        float("nan"),
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trials", type=int, default=1000, help="simulated comparisons per case")
    ap.add_argument(
        "--hier-trials", type=int, default=300, help="of them for the (slow) hierarchical bootstrap"
    )
    ap.add_argument("--steps", type=int, default=50, help="timed steps per process")
    ap.add_argument("--phi", type=float, default=0.5, help="lag-1 autocorrelation of steps")
    ap.add_argument("--step-sd", type=float, default=0.05, help="sd of a step's log time")
    ap.add_argument("--process-sd", type=float, default=0.05, help="sd of a process's log level")
    ap.add_argument(
        "--slow-share",
        type=float,
        default=0.0,
        help="share of processes in a slow mode (bimodal levels, e.g. 0.2)",
    )
    ap.add_argument("--slow-by", type=float, default=0.10, help="how much slower that mode is")
    ap.add_argument("--repeats", type=int, nargs="+", default=[1, 2, 3, 5, 8])
    ap.add_argument("--speedup", type=float, default=1.3, help="the real speedup for power")
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    print(f"{a.trials} trials per case ({a.hier_trials} for the hierarchical bootstrap); "
          f"{a.steps} steps per process, AR(1) phi {a.phi}, step sd {a.step_sd:.0%}, "
          f"process sd {a.process_sd:.0%}"
          + (f", {a.slow_share:.0%} of processes {a.slow_by:.0%} slower"
             if a.slow_share else ""))  # fmt: skip
    methods = ("before", "hier. bootstrap", "after")
    print("\nA/A (truth 1.0): share of faster/slower verdicts (target <= 5%) | "
          "interval coverage (target ~95%)")  # fmt: skip
    print(f"{'repeats':>7}  " + "  ".join(f"{m:>22}" for m in methods) + "  after: no verdict")
    for k in a.repeats:
        r = evaluate(rng, k, 1.0, a)
        cells = "  ".join(f"{r[m][0]:>10.1%} | {r[m][1]:>9.1%}" for m in methods)
        print(f"{k:>7}  {cells}  {r['after: withheld'][0]:>17.0%}")
    print(f"\nA real {a.speedup}x: share of 'faster' verdicts (power) | "
          f"interval coverage of {a.speedup}")  # fmt: skip
    print(f"{'repeats':>7}  " + "  ".join(f"{m:>22}" for m in methods))
    for k in a.repeats:
        if k < 2:
            continue
        r = evaluate(rng, k, a.speedup, a)
        print(f"{k:>7}  " + "  ".join(f"{r[m][0]:>10.1%} | {r[m][1]:>9.1%}" for m in methods))
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
