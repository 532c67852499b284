"""Where the variance of a paired speedup is, and what that costs: from the records of a
paired run (a results folder), per comparison.

For each comparison (host, batch size, policy against float32) the processes' log ratios
(one per round of adjacent windows) split into two levels, as in Kalibera & Jones
("Rigorous benchmarking in reasonable time", 2013): the rounds inside a process (sigma_w^2,
pooled) and the processes (sigma_b^2 = the variance of the process means minus what their
rounds put into it; means and plain variances, where `repeats: auto` summarises a process by
its rounds' median and a robust spread). With the process's fixed cost (start, import,
build, first steps: the record's ``phases_s`` less the timed windows and the hand-offs
between them) and the cost of one more round (a round's windows and hand-offs), it prints:

- n_opt: the rounds per process that minimise the time for a given precision,
  sqrt(c_process / c_round * sigma_w^2 / sigma_b^2);
- k_clear: the fewest processes whose interval at the stop level (99%, Student's t over
  processes, k - 1 degrees of freedom) excludes 1, if the speedup and the variances are what
  this run measured, at the run's own rounds per process; and the wall time that takes.
  That is the stop rule (``stats.judge_paired``: k - 1 degrees of freedom always, the
  processes' spread floored at ``stats.DRIFT`` times their rounds').

This is what decides how fast a run can say "faster": no choice of rounds per process helps
once sigma_b^2 dominates, and each process costs its fixed seconds.

    python benchmarks/variance_components.py RESULTS_DIR [--level 0.99]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from scipy.stats import t as student


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--level", type=float, default=0.99)
    args = ap.parse_args()
    lines = [ln for f in sorted(args.results.glob("*.jsonl")) for ln in f.read_text().splitlines()]
    recs = [json.loads(ln) for ln in lines if ln.strip()]
    final = {r["cell"]: r for r in recs if not r.get("pending")}  # the last record a cell
    groups: dict[tuple[str, int, str], list[list[float]]] = defaultdict(list)
    fixed: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    rounds_s: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for r in final.values():
        pair = r.get("pairing") or {}
        if r["status"] != "ok" or not pair.get("ratios"):
            continue
        key = (r["host"], r["params"]["batch_size"], r["params"]["policy"])
        groups[key].append([math.log(x) for x in pair["ratios"] if x > 0])
        phases = r["metrics"].get("phases_s") or {}
        windows = phases.get("timed", 0.0) + phases.get("fit_other", 0.0)  # and hand-offs
        fixed[key].append(sum(phases.values()) - windows)
        rounds_s[key].append(windows / max(1, len(pair["ratios"])))
    if not groups:
        raise SystemExit(f"no paired records with ratios under {args.results}")
    q = (1 + args.level) / 2
    print(f"level {args.level:.0%} (the stop level of repeats: auto)")
    for key in sorted(groups):
        procs = groups[key]
        k, n = len(procs), statistics.fmean(len(p) for p in procs)
        several = [statistics.variance(p) for p in procs if len(p) > 1]
        if k < 2 or not several:
            print(
                f"\n{key[0]} bs={key[1]} {key[2]}: {k} process(es), {n:.0f} round(s) each: "
                "two processes and two rounds at least are needed to split the variance"
            )
            continue
        means = [statistics.fmean(p) for p in procs]
        s2_w = statistics.fmean(several)
        s2_means = statistics.variance(means)
        s2_b = max(0.0, s2_means - s2_w / n)
        c_proc, c_round = statistics.fmean(fixed[key]), statistics.fmean(rounds_s[key])
        mu = statistics.fmean(means)
        print(
            f"\n{key[0]} bs={key[1]} {key[2]}: {k} processes, {n:.0f} rounds each, "
            f"speedup {math.exp(mu):.3f}"
        )
        print(
            f"  log ratio variance: rounds sigma_w^2 {s2_w:.5f} (sd {math.sqrt(s2_w):.3f}); "
            f"processes sigma_b^2 {s2_b:.5f} (sd {math.sqrt(s2_b):.3f}); "
            f"the process means' own {s2_means:.5f}"
        )
        print(f"  cost: {c_proc:.1f} s a process besides its windows, {c_round:.2f} s a round")
        n_opt = math.sqrt(c_proc / c_round * s2_w / s2_b) if s2_b > 0 else math.inf
        per_mean = s2_b + s2_w / n
        clear = next(
            (j for j in range(2, 41) if abs(mu) > student.ppf(q, j - 1) * math.sqrt(per_mean / j)),
            None,
        )
        wall = clear * (c_proc + n * c_round) if clear else None
        print(
            f"  n_opt {n_opt:.1f} rounds a process; k_clear {clear} processes "
            f"(at {n:.0f} rounds: {wall:.0f} s of processes)"
            if clear
            else f"  n_opt {n_opt:.1f}; no clear verdict within 40 processes"
        )


if __name__ == "__main__":
    main()
