"""``repeats: auto`` on a known truth: does adding processes until the interval is narrow
keep the verdicts honest, and how many processes does it take?

Simulated processes as in ``benchmarks/calibration.py`` (each process its own log-normal
level, sd --process-sd; AR(1) steps). Each trial runs the real rule
(:func:`mxbench.cells.repeats.decide`): ``start`` processes per policy, then one more per policy
while it says so, up to ``max``. Prints, per process-level sd and truth (A/A 1.0, a real
--speedup): the share of faster/slower verdicts (A/A: the false-verdict rate, target at
most 5%; else the power), the interval's coverage of the truth, processes per policy
(median and 90th percentile) and why the trials stopped. The stopping rule looks at the
interval's width and the processes' agreement, never at the verdict, so it cannot hunt for
significance; this checks that.

    PYTHONPATH=runner python benchmarks/auto_repeats.py [--trials 1000] [--target 0.03]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mxbench.matrix.params import Params
from mxbench.records.record import Metrics, Record, StepStats
from mxbench.records.summary import processes

from calibration import process
from mxbench import stats
from mxbench.cells import repeats


def record(policy: str, steps: np.ndarray) -> Record:
    q1, med, q3 = (float(x) for x in np.quantile(steps, [0.25, 0.5, 0.75]))
    step = StepStats(median=med, p25=q1, p75=q3, n=len(steps), samples=steps.tolist())
    return Record(params=Params(policy=policy), status="ok", metrics=Metrics(step_ms=step))


def trial(rng: np.random.Generator, truth: float, cfg: repeats.AutoRepeats,
          a: argparse.Namespace) -> tuple[stats.Ratio, int, str]:  # fmt: skip
    """One auto run of two policies: the final ratio, processes per policy, why it stopped."""
    levels = {"float32": 100.0, "mixed_bfloat16": 100.0 / truth}
    by: dict[str, list[Record]] = {p: [] for p in levels}

    def add() -> None:
        for p, mean in levels.items():  # alternating, as the orchestrator runs them
            level = mean * float(np.exp(rng.normal(0.0, a.process_sd)))
            by[p].append(record(p, process(rng, level, a.steps, a.phi, a.step_sd)))

    for _ in range(cfg.start):
        add()
    while (d := repeats.decide(cfg, by, len(by["float32"]))).more:
        add()
    ratio = stats.judge([(processes(by["float32"]), processes(by["mixed_bfloat16"]))])[0]
    assert ratio is not None
    return ratio, len(by["float32"]), d.why


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per process")
    ap.add_argument("--phi", type=float, default=0.5, help="lag-1 autocorrelation of steps")
    ap.add_argument("--step-sd", type=float, default=0.05)
    ap.add_argument("--process-sd", type=float, nargs="+", default=[0.01, 0.03, 0.05])
    ap.add_argument("--speedup", type=float, default=1.05)
    ap.add_argument("--target", type=float, default=0.03)
    ap.add_argument("--max", type=int, default=10)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    cfg = repeats.AutoRepeats(start=3, target=a.target, max=a.max, budget_s=1e9)
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    print(f"{a.trials} trials per row; {a.steps} steps per process, AR(1) phi {a.phi}, step sd "
          f"{a.step_sd:.0%}; auto: start 3, target ±{a.target:.0%}, max {a.max}")  # fmt: skip
    print(f"{'process sd':>10} {'truth':>6} {'verdicts':>9} {'coverage':>9} "
          f"{'processes (median, p90)':>24}  stopped")  # fmt: skip
    for sd in a.process_sd:
        a.process_sd = sd
        for truth in (1.0, a.speedup):
            runs = [trial(rng, truth, cfg, a) for _ in range(a.trials)]
            said = np.mean([r.verdict in (stats.FASTER, stats.SLOWER) for r, _, _ in runs])
            cover = np.mean([r.low <= truth <= r.high for r, _, _ in runs])
            n = sorted(k for _, k, _ in runs)
            why = Counter(w for _, _, w in runs)
            whys = ", ".join(f"{w} {c / a.trials:.0%}" for w, c in why.most_common())
            print(
                f"{sd:>10.0%} {truth:>6.2f} {said:>9.1%} {cover:>9.1%} "
                f"{statistics.median(n):>15.0f}, {n[int(0.9 * (len(n) - 1))]:>6}  {whys}"
            )
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
