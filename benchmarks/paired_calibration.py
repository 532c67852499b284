"""Does the paired design's interval hold its level on a machine in use? A simulation with a
known truth, for the paired design and for one policy per process.

The machine: its slowdown moves with time, at the scale of seconds (an Ornstein-Uhlenbeck
drift of the log step time, sd --drift-sd, time constant --drift-tau s) and a bursty
competing load (on for a random 0.2-2 s, off for a random 0.2-2 s, slowing every step by
--burst while on; a window that overlaps a burst is seen as disturbed, as the interference
probe sees it). Steps have log-normal noise (--step-sd). Each process may add its own effect
on the arms' ratio (--process-sd: memory placement, thread placement).

- **paired**: each process times both arms in windows of --window-steps steps, rounds in a
  random order, --rounds rounds; its ratio is :func:`mxbench.stats.paired_process` (undisturbed
  rounds when enough), the interval :func:`mxbench.stats.judge_paired` over processes.
- **process**: each process times one arm, --steps steps, processes alternating A B A B;
  :func:`mxbench.stats.judge` (Welch's t over processes).
- **auto**: as ``repeats: auto`` runs it (:func:`mxbench.cells.repeats.stop`, the rule of
  :func:`mxbench.cells.repeats.decide`): its ``start`` processes per comparison, then one more while
  the verdict is not clear and there is not clearly no difference (within ±--target), at most
  --max: the rate of false verdicts with the looks it takes.

For each truth (1.0: A/A, and --speedup) it prints, over --trials: the share of verdicts
faster / slower / no clear difference, how often the 95 % interval covers the truth, and the
median estimate's error.

    python benchmarks/paired_calibration.py [--trials 1000] [--speedup 1.35] [--burst 0.5]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy.signal import lfilter

from mxbench import stats
from mxbench.cells import repeats


class Machine:
    """The slowdown (log) of a machine in use, as a function of time, sampled on a grid."""

    def __init__(self, rng: np.random.Generator, seconds: float, args: argparse.Namespace):
        dt = 0.01
        n = int(seconds / dt) + 1
        drift = np.empty(n)
        drift[0] = rng.normal(0, args.drift_sd)
        a = math.exp(-dt / args.drift_tau)
        noise = rng.normal(0, args.drift_sd * math.sqrt(1 - a * a), n)
        # drift[i] = a * drift[i - 1] + noise[i], as a filter (a Python loop took most of the time)
        drift[1:] = lfilter([1.0], [1.0, -a], noise[1:], zi=[a * drift[0]])[0]
        burst = np.zeros(n, dtype=bool)
        t, on = 0.0, bool(rng.integers(2))
        while t < seconds:
            span = rng.uniform(0.2, 2.0)
            if on and args.burst > 0:
                burst[int(t / dt) : int((t + span) / dt)] = True
            t += span
            on = not on
        self.dt, self.drift, self.burst = dt, drift, burst
        self.slow = drift + np.where(burst, math.log1p(args.burst), 0.0)

    def at(self, t0: float, t1: float) -> tuple[float, bool]:
        """The mean log slowdown over [t0, t1) and whether a burst touched it."""
        i, j = int(t0 / self.dt), max(int(t0 / self.dt) + 1, int(t1 / self.dt))
        j = min(j, len(self.slow))
        i = min(i, j - 1)
        return float(self.slow[i:j].mean()), bool(self.burst[i:j].any())


def paired_process(
    rng: np.random.Generator, m: Machine, t: float, truth: float, args: argparse.Namespace
) -> tuple[tuple[float, float] | None, float]:
    """One paired process starting at ``t``: its summary, and when it ended."""
    base_ms, k = 25.0, args.window_steps
    effect = rng.normal(0, args.process_sd)
    ratios, clean = [], []
    t += args.overhead_s
    for _ in range(args.rounds):
        order = [0, 1] if rng.integers(2) else [1, 0]
        per: dict[int, float] = {}
        hit = False
        for arm in order:
            level = base_ms if arm == 0 else base_ms / truth * math.exp(effect)
            span = level * k / 1000
            slow, burst = m.at(t, t + span)
            steps = level * np.exp(slow + rng.normal(0, args.step_sd, k))
            per[arm] = float(steps.mean())
            t += float(steps.sum()) / 1000
            hit = hit or burst
        ratios.append(per[0] / per[1])
        clean.append(not hit)
    return stats.paired_process(ratios, clean), t


def process_process(rng: np.random.Generator, m: Machine, t: float, level: float,
                    args: argparse.Namespace) -> tuple[tuple[float, float], float]:  # fmt: skip
    t += args.overhead_s
    span = level * args.steps / 1000
    slow, _ = m.at(t, t + span)
    steps = level * np.exp(slow + rng.normal(0, args.step_sd, args.steps)
                           + rng.normal(0, args.process_sd))  # fmt: skip
    med, var = stats.summarise([steps])
    return (float(med[0]), float(var[0])), t + float(steps.sum()) / 1000


def auto_paired(rng: np.random.Generator, truth: float, args: argparse.Namespace) -> stats.Ratio:
    m = Machine(rng, args.max * (args.overhead_s + 4 * args.rounds) + 60, args)
    t, procs = rng.uniform(0, 20), []
    ratio = None
    cfg = repeats.AutoRepeats(target=args.target, max=args.max)
    while len(procs) < args.max:
        p, t = paired_process(rng, m, t, truth, args)
        if p is not None:
            procs.append(p)
        if len(procs) < cfg.start:
            continue
        ratio = stats.judge_paired([procs])[0]
        firm = stats.judge_paired([procs], repeats.STOP_LEVEL)[0]
        assert ratio is not None and firm is not None
        if repeats.stop(cfg, [ratio], [firm], len(procs)) != "more":
            break
    assert ratio is not None
    return ratio


def fixed(rng: np.random.Generator, truth: float, k: int, design: str,
          args: argparse.Namespace) -> stats.Ratio:  # fmt: skip
    m = Machine(rng, k * 2 * (args.overhead_s + 4 * args.rounds) + 60, args)
    t = rng.uniform(0, 20)
    if design == "paired":
        procs = []
        for _ in range(k):
            p, t = paired_process(rng, m, t, truth, args)
            if p is not None:
                procs.append(p)
        r = stats.judge_paired([procs])[0]
    else:
        sides: tuple[list[tuple[float, float]], list[tuple[float, float]]] = ([], [])
        for _ in range(k):
            for arm, level in ((0, 25.0), (1, 25.0 / truth)):
                p, t = process_process(rng, m, t, level, args)
                sides[arm].append(p)
        r = stats.judge([sides])[0]
    assert r is not None
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--speedup", type=float, default=1.35)
    ap.add_argument("--drift-sd", type=float, default=0.15)
    ap.add_argument("--drift-tau", type=float, default=5.0)
    ap.add_argument("--burst", type=float, default=0.5, help="slowdown while a burst is on")
    ap.add_argument("--step-sd", type=float, default=0.08)
    ap.add_argument("--process-sd", type=float, default=0.01)
    ap.add_argument("--window-steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--overhead-s", type=float, default=9.0)
    ap.add_argument("--target", type=float, default=0.03)
    ap.add_argument("--max", type=int, default=6)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(
        f"drift sd {args.drift_sd} (tau {args.drift_tau} s), bursts x{1 + args.burst:.2f}, "
        f"step sd {args.step_sd}, process sd {args.process_sd}; {args.trials} trials"
    )
    print(f"{'truth':>6} {'method':>16} {'faster':>7} {'slower':>7} {'same':>7} "
          f"{'covers':>7} {'error':>7}")  # fmt: skip
    methods = (("paired k=2", 2, "paired"), ("paired k=3", 3, "paired"),
               ("process k=3", 3, "process"), ("paired auto", 0, "auto"))  # fmt: skip
    for truth in (1.0, args.speedup):
        for name, k, design in methods:
            rs = [auto_paired(rng, truth, args) if design == "auto"
                  else fixed(rng, truth, k, design, args) for _ in range(args.trials)]  # fmt: skip
            share = {v: sum(r.verdict == v for r in rs) / len(rs)
                     for v in (stats.FASTER, stats.SLOWER, stats.SAME)}  # fmt: skip
            covers = sum(r.low <= truth <= r.high for r in rs) / len(rs)
            error = float(np.median([abs(r.value / truth - 1) for r in rs]))
            print(f"{truth:>6.2f} {name:>16} {share[stats.FASTER]:>7.1%} "
                  f"{share[stats.SLOWER]:>7.1%} {share[stats.SAME]:>7.1%} {covers:>7.1%} "
                  f"{error:>7.1%}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
