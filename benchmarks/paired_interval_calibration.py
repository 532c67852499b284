"""Does the paired interval hold its level where processes differ and the ratio drifts
inside a process? A simulation with a known truth, fitted to this project's measurements,
put through mxbench's own rule and ``repeats: auto``'s every look.

**The model** of one paired process's rounds (log ratios, one per round of adjacent windows):

    x_j = log(truth) + P + D_j + e_j,   j = 1 .. --rounds (13: 6 s of windows, the default)

- ``P ~ N(0, process_sd^2)``: the process's own effect on the ratio (the build, memory and
  thread placement): processes seconds apart differ by SD 0.05-0.09 in the log ratio on
  this 2-core VM;
- ``D``: the drift inside a process, an AR(1) across rounds (coefficient ``phi``, stationary
  variance a share ``s`` of the rounds' variance);
- ``e``: the rest of the rounds' variance, Student's t with 5 degrees of freedom (heavier
  tails than the estimator's normal).

Neither the process effect, nor the drift, nor the tails are what the estimator assumes
(:func:`mxbench.stats.summarise`: independent rounds, or a lag-1 correction).

**The fit** of (phi, s), by the simulated method of moments, to two statistics of the
committed records:

- ``cpu-step18-drift/same-pair-blocks.jsonl``: 3 processes, 5 blocks of 6 s each of the same
  built pair: the variance of the blocks' log medians inside a process over the median of
  their standard errors (from the rounds, as the records give them): 1 for independent
  rounds, more where the ratio drifts;
- ``cpu-step18-series/quiet/*``: the rounds' pooled lag-1 autocorrelation inside a process
  (27 processes of the embedded default).

Each model's statistics come from datasets of the records' own sizes; the fit minimises
their squared distance in units of the model's own spread. At the fit, ``DRIFT``: how many
times the rounds' variance estimate a process's log median varies with no effect of the
process (what :data:`mxbench.stats.DRIFT` floors the processes' spread at).

**The table**: for each process SD (0.05, 0.07, 0.09) x round SD (0.10, 0.15, 0.25) and
k = 2..6 processes, --tables simulated comparisons a truth, A/A (truth 1.0) and 1.3x:

- ``repeats: k`` (k processes, :func:`mxbench.stats.judge_paired`'s rule): A/A false verdicts
  (faster or slower), how often it finds the 1.3x (faster), how often its 95% interval
  covers 1.3;
- ``repeats: auto`` with ``auto_repeats`` at its defaults but ``max: k``: a look after every
  process from ``start``, :func:`mxbench.cells.repeats.stop`'s rule (stop when the 99% interval
  excludes no difference, or the 95% one is within the target around 1, or at ``max``),
  the 95% interval where it stopped: the same three figures and the processes it took;
- the rule before issue 48 (``df = k - 1`` where the processes differ more than half their
  rounds' variance, else ``5 k``) at k processes: its A/A false verdicts.

Then a few rows off that grid: the early stop at 99.5%, a larger process SD
(0.15), ``max: 10``, and no round noise at all (the processes' spread only: the floor never
helps, the t interval alone holds the level).

    python benchmarks/paired_interval_calibration.py [--tables 100000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mxbench import stats
from mxbench.cells import repeats

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"
TAIL_DF = 5  # the rounds' noise: Student's t with this many degrees of freedom
PROCESS_SD = (0.05, 0.07, 0.09)
ROUND_SD = (0.10, 0.15, 0.25)
KS = (2, 3, 4, 5, 6)
SPEEDUP = 1.3


# ---------------------------------------------------------------- the model


def rounds(rng: np.random.Generator, n: int, length: int, sd: float, phi: float,
           share: float) -> np.ndarray:  # fmt: skip
    """``n`` processes' worth of ``length`` rounds of log-ratio noise (no process effect):
    an AR(1) drift carrying ``share`` of the variance ``sd``^2, the rest Student's t."""
    drift_sd, rest_sd = sd * math.sqrt(share), sd * math.sqrt(1 - share)
    d = np.empty((n, length))
    d[:, 0] = rng.normal(0, drift_sd, n)
    shocks = rng.normal(0, drift_sd * math.sqrt(1 - phi * phi), (n, length))
    for j in range(1, length):
        d[:, j] = phi * d[:, j - 1] + shocks[:, j]
    tails = rng.standard_t(TAIL_DF, (n, length)) / math.sqrt(TAIL_DF / (TAIL_DF - 2))
    return d + rest_sd * tails


def log_ratios(rng: np.random.Generator, tables: int, k: int, truth: float,
               process_sd: float, round_sd: float, fit: dict[str, float], length: int
               ) -> np.ndarray:  # fmt: skip
    """``tables`` x ``k`` paired processes' rounds: their log ratios, (tables, k, length)."""
    x = rounds(rng, tables * k, length, round_sd, fit["phi"], fit["share"])
    x += math.log(truth) + rng.normal(0, process_sd, (tables * k, 1))
    return x.reshape(tables, k, length)


def summaries(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each process's log ratio and its variance from its rounds (``x``: :func:`log_ratios`),
    as :func:`mxbench.stats.paired_process` summarises them (every round clean)."""
    tables, k, length = x.shape
    med, within = stats.summarise(np.exp(x.reshape(tables * k, length)))
    return np.log(med).reshape(tables, k), within.reshape(tables, k)


def processes(rng: np.random.Generator, tables: int, k: int, truth: float, process_sd: float,
              round_sd: float, fit: dict[str, float], length: int
              ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``tables`` x ``k`` paired processes, summarised (:func:`summaries`)."""
    return summaries(log_ratios(rng, tables, k, truth, process_sd, round_sd, fit, length))


# ---------------------------------------------------------------- the fit


def drift_data() -> tuple[float, float, dict[str, object]]:
    """The two statistics of the committed records, and what they were made from."""
    lines = (RECORDS / "cpu-step18-drift" / "same-pair-blocks.jsonl").read_text().splitlines()
    blocks = [json.loads(line)["blocks"] for line in lines]
    var, se2 = [], []
    for proc in blocks:
        b = np.array([row[:3] for row in proc], dtype=float)  # median ratio, rounds, its SE
        var.append(np.log(b[:, 0]).var(ddof=1))
        se2 += list((math.sqrt(math.pi / 2) * b[:, 2] / b[:, 0]) ** 2)
    excess = float(np.mean(var) / np.median(se2))
    series = []
    for f in sorted((RECORDS / "cpu-step18-series" / "quiet").glob("paired-*/local.jsonl")):
        for line in f.read_text().splitlines():
            pairing = json.loads(line).get("pairing") or {}
            if pairing.get("ratios"):
                series.append(np.log(pairing["ratios"]))
    lag1 = _lag1(series)
    said = {"blocks": [len(p) for p in blocks], "rounds_per_block": float(np.mean(
        [row[1] for p in blocks for row in p])), "series_processes": len(series),
        "series_rounds": float(np.mean([len(s) for s in series]))}  # fmt: skip
    return excess, lag1, said


def _lag1(rows: list[np.ndarray] | np.ndarray) -> float:
    c = [r - r.mean() for r in rows]
    return float(sum((x[1:] * x[:-1]).sum() for x in c) / sum((x * x).sum() for x in c))


def model_stats(rng: np.random.Generator, phi: float, share: float, reps: int
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The two statistics of ``reps`` datasets of the records' sizes from the model."""
    n_proc, n_block, per = 3, 5, 12
    x = rounds(rng, reps * n_proc, n_block * per, 1.0, phi, share)
    r = np.exp(0.12 * x).reshape(reps, n_proc, n_block, per)  # quiet rounds: SD about 0.12
    med = np.median(r, axis=3)
    se = math.sqrt(math.pi / 2) * r.std(axis=3, ddof=1) / math.sqrt(per) / med
    var = np.log(med).var(axis=2, ddof=1).mean(axis=1)
    excess = var / np.median(se.reshape(reps, -1) ** 2, axis=1)
    y = rounds(rng, reps * 27, 13, 1.0, phi, share).reshape(reps, 27, 13)
    c = y - y.mean(axis=2, keepdims=True)
    lag1 = (c[:, :, 1:] * c[:, :, :-1]).sum(axis=(1, 2)) / (c * c).sum(axis=(1, 2))
    return excess, lag1


def fit_drift(rng: np.random.Generator, reps: int) -> dict[str, float]:
    """(phi, share) nearest the records' statistics, and the drift factor at it."""
    excess, lag1, said = drift_data()
    print(f"records: block-median variance / rounds' SE^2 = {excess:.2f} (3 processes x 5 "
          f"blocks of {said['rounds_per_block']:.1f} rounds); pooled lag-1 of rounds = "
          f"{lag1:+.3f} ({said['series_processes']} processes of "
          f"{said['series_rounds']:.1f} rounds)")  # fmt: skip
    grid = []
    for phi in np.arange(0.0, 0.96, 0.05):
        for share in np.arange(0.0, 0.61, 0.05):
            e, l1 = model_stats(rng, float(phi), float(share), reps)
            dist = ((excess - e.mean()) / e.std()) ** 2 + ((lag1 - l1.mean()) / l1.std()) ** 2
            grid.append((float(dist), float(phi), float(share), float(e.mean()), float(l1.mean())))
    grid.sort()
    print("fit (simulated method of moments; distance in the model's own SDs):")
    for dist, phi, share, e, l1 in grid[:5]:
        print(f"  phi {phi:.2f}  drift share {share:.2f}: excess {e:.2f}, lag-1 {l1:+.3f}, "
              f"distance {dist:.2f}")  # fmt: skip
    independent = next(g for g in grid if g[1] == 0.0 and g[2] == 0.0)
    print(f"  independent rounds (phi 0, share 0): excess {independent[3]:.2f}, lag-1 "
          f"{independent[4]:+.3f}, distance {independent[0]:.2f}")  # fmt: skip
    _, phi, share, *_ = grid[0]
    fit = {"phi": phi, "share": share}
    x = rounds(rng, 200_000, 13, 0.15, phi, share)
    med, within = stats.summarise(np.exp(x))
    fit["drift"] = float(np.log(med).var() / within.mean())
    print(f"at the fit a process's log median varies {fit['drift']:.2f}x what its rounds say "
          f"(stats.DRIFT = {stats.DRIFT})")  # fmt: skip
    return fit


# ---------------------------------------------------------------- the rules


def old_rule(logs: np.ndarray, within: np.ndarray, level: float = stats.LEVEL
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """``judge_paired`` before issue 48: t with k - 1 degrees of freedom where the processes
    differ more than half their rounds' variance, else with 5 k (the rounds' own)."""
    from scipy.special import stdtrit

    k = logs.shape[1]
    mean, between, w = logs.mean(axis=1), logs.var(axis=1, ddof=1), within.mean(axis=1)
    df = np.where(between > w / 2, k - 1, k * 5)
    half = stdtrit(df, (1 + level) / 2) * np.sqrt(np.maximum(between, w) / k)
    return mean, mean - half, mean + half


Rule = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]


def auto(logs: np.ndarray, within: np.ndarray, cfg: repeats.AutoRepeats,
         rule: Rule = stats.paired_intervals, stop_level: float = repeats.STOP_LEVEL
         ) -> dict[str, np.ndarray]:  # fmt: skip
    """``repeats: auto`` over the first processes of each row, a look after every one from
    ``cfg.start`` to ``cfg.max`` (:func:`mxbench.cells.repeats.stop`'s rule, vectorised): where
    each stopped, why, and the 95% interval there."""
    n = len(logs)
    out = {"k": np.zeros(n, int), "low": np.zeros(n), "high": np.zeros(n), "mean": np.zeros(n),
           "clear": np.zeros(n, bool)}  # fmt: skip
    going = np.ones(n, bool)
    for k in range(cfg.start, cfg.max + 1):
        mean, low, high = rule(logs[:, :k], within[:, :k], stats.LEVEL)
        _, firm_low, firm_high = rule(logs[:, :k], within[:, :k], stop_level)
        # clear at the stop level, or gross (repeats.GROSS) and clear at 95%
        gross = np.abs(mean) >= math.log(repeats.GROSS)
        clear = (firm_low > 0) | (firm_high < 0) | (gross & ((low > 0) | (high < 0)))
        # clearly no difference: the 95% interval around 1 and within the target
        # (repeats.width: its geometric half-width, here in logs)
        none = (low <= 0) & (high >= 0) & (np.exp((high - low) / 2) - 1 <= cfg.target)
        now = going & (clear | none | (k >= cfg.max))
        for key, value in (("k", k), ("low", low), ("high", high), ("mean", mean),
                           ("clear", clear)):  # fmt: skip
            out[key][now] = value if np.isscalar(value) else value[now]
        going &= ~now
    return out


def figures(low: np.ndarray, high: np.ndarray, truth: float) -> dict[str, float]:
    t = math.log(truth)
    # A/A: any verdict is false; a real difference: the right verdict found
    wrong = (low > 0) | (high < 0) if truth == 1.0 else low > 0 if truth > 1 else high < 0
    return {"verdict": float(wrong.mean()), "covers": float(((low <= t) & (t <= high)).mean())}


# ---------------------------------------------------------------- the table


def row(rng: np.random.Generator, fit: dict[str, float], process_sd: float, round_sd: float,
        tables: int, length: int, cfg: repeats.AutoRepeats, ks: tuple[int, ...] = KS,
        stop_level: float = repeats.STOP_LEVEL, speedup: float = SPEEDUP
        ) -> list[dict[str, float]]:  # fmt: skip
    """Every k of one (process SD, round SD): the figures of both designs and the old rule
    (``speedup``: the real difference's truth)."""
    most = max(max(ks), cfg.max)
    sims = {truth: processes(rng, tables, most, truth, process_sd, round_sd, fit, length)
            for truth in (1.0, speedup)}  # fmt: skip
    out = []
    for k in ks:
        got: dict[str, float] = {"process_sd": process_sd, "round_sd": round_sd, "k": k}
        for truth, (logs, within) in sims.items():
            tag = "aa" if truth == 1.0 else "real"
            _, low, high = stats.paired_intervals(logs[:, :k], within[:, :k])
            fixed = figures(low, high, truth)
            ran = auto(logs, within, _with(cfg, max=max(k, cfg.start)), stop_level=stop_level)
            seq = figures(ran["low"], ran["high"], truth)
            got |= {f"fixed_{tag}": fixed["verdict"], f"fixed_{tag}_covers": fixed["covers"],
                    f"auto_{tag}": seq["verdict"], f"auto_{tag}_covers": seq["covers"],
                    f"auto_{tag}_k": float(ran["k"].mean())}  # fmt: skip
            if truth == 1.0:
                _, low, high = old_rule(logs[:, :k], within[:, :k])
                got["old_aa"] = figures(low, high, truth)["verdict"]
        out.append(got)
    return out


def _with(cfg: repeats.AutoRepeats, **changes: int) -> repeats.AutoRepeats:
    import msgspec

    return msgspec.structs.replace(cfg, **changes)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


COLUMNS = (
    "processes | process SD | round SD | `repeats: k`: A/A false verdicts | finds 1.3× | "
    "covers 1.3× | `auto`, max k: A/A false verdicts | finds 1.3× | covers 1.3× | processes "
    "taken (A/A, 1.3×) | old rule: A/A false verdicts"
)


def markdown(rows: list[dict[str, float]], what: list[str] | None = None) -> str:
    """The rows as a table; ``what``: a first column saying what each row changes."""
    first = "| what " if what else ""
    lines = [f"{first}| {COLUMNS} |", ("|---" if what else "") + "|--:" * 11 + "|"]
    for i, r in enumerate(rows):
        lines.append(
            (f"| {what[i]} " if what else "")
            + f"| {r['k']:.0f} | {r['process_sd']:.2f} | {r['round_sd']:.2f} | "
            f"{pct(r['fixed_aa'])} | {pct(r['fixed_real'])} | {pct(r['fixed_real_covers'])} | "
            f"{pct(r['auto_aa'])} | {pct(r['auto_real'])} | {pct(r['auto_real_covers'])} | "
            f"{r['auto_aa_k']:.1f}, {r['auto_real_k']:.1f} | {pct(r['old_aa'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=100_000, help="comparisons a truth and row")
    ap.add_argument("--rounds", type=int, default=13, help="rounds per process")
    ap.add_argument("--reps", type=int, default=1000, help="datasets per point of the fit")
    ap.add_argument("--seed", type=int, default=48)
    ap.add_argument("--out", type=Path, help="write table.md and calibration.json here")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.monotonic()
    fit = fit_drift(rng, args.reps)
    cfg = repeats.AutoRepeats()
    print(f"repeats: auto at its defaults: start {cfg.start}, max {cfg.max} (each row: max k), "
          f"stop at {repeats.STOP_LEVEL:.0%} or within ±{cfg.target:.0%} around 1; "
          f"{args.tables} comparisons a truth and row, {args.rounds} rounds a process, "
          f"seed {args.seed}")  # fmt: skip
    rows = []
    for process_sd in PROCESS_SD:
        for round_sd in ROUND_SD:
            rows += row(rng, fit, process_sd, round_sd, args.tables, args.rounds, cfg)
            print(f"  process SD {process_sd}, round SD {round_sd}: done "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)  # fmt: skip
    rows.sort(key=lambda r: (r["k"], r["process_sd"], r["round_sd"]))
    table = markdown(rows)
    print(table)
    off: list[dict[str, float]] = []
    notes: list[str] = []
    for process_sd, round_sd, at_most, level, truth, note in (
        (0.09, 0.10, cfg.max, 0.995, SPEEDUP, "auto's early stop at 99.5% instead of 99%"),
        (0.15, 0.10, cfg.max, repeats.STOP_LEVEL, SPEEDUP, "process SD 0.15"),
        (0.15, 0.25, cfg.max, repeats.STOP_LEVEL, SPEEDUP, "process SD 0.15, noisy rounds"),
        (0.09, 0.10, 10, repeats.STOP_LEVEL, SPEEDUP, "`max: 10`"),
        (
            0.09,
            1e-9,
            cfg.max,
            repeats.STOP_LEVEL,
            SPEEDUP,
            "no round noise: the processes' spread only",
        ),
        (
            0.09,
            0.25,
            cfg.max,
            repeats.STOP_LEVEL,
            1 / 10,
            "a gross truth: 10x slower (bfloat16 emulated), found as slower; 'real k': "
            "its processes (repeats.GROSS stops at 2)",
        ),
        (
            0.30,
            0.25,
            cfg.max,
            repeats.STOP_LEVEL,
            SPEEDUP,
            "process SD 0.30: 3x the largest measured, where the gross stop could mislead",
        ),
    ):
        got = row(rng, fit, process_sd, round_sd, args.tables, args.rounds,
                  _with(cfg, max=at_most), ks=(at_most,), stop_level=level,
                  speedup=truth)[0]  # fmt: skip
        off.append(got)
        notes.append(note)
    extra = markdown(off, notes)
    print("off the grid:\n" + extra)
    print(f"{time.monotonic() - t0:.0f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text(table + "\n")
        (args.out / "off-grid.md").write_text(extra + "\n")
        (args.out / "calibration.json").write_text(json.dumps(
            {"fit": fit, "tables": args.tables, "rounds": args.rounds, "seed": args.seed,
             "auto": {"start": cfg.start, "max": cfg.max, "target": cfg.target,
                      "stop_level": repeats.STOP_LEVEL},
             "rows": rows, "off_grid": [r | {"what": w} for r, w in zip(off, notes, strict=True)]},
            indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
