"""``benchmark.repeats: auto``: as many fresh processes per cell as the answer needs.

A speedup needs the variation between processes (:mod:`mxbench.stats`), and how many
processes that takes depends on the machine: a quiet GPU agrees with itself after three, a
shared 2-core VM may not after thirty. With ``repeats: auto`` (the default: a matrix that
leaves ``repeats`` out gets it) every cell starts with ``start`` fresh processes (policies
alternating, as with a fixed count: the cells and keys are those of ``repeats: <start>``,
except that where ``repeats`` is left out the first process keeps the key an unrepeated
cell had, ``first_repeat`` in :mod:`mxbench.matrix.file`), and then, per *comparison group*
(the cells that differ only in policy: every policy against float32 at one batch size on
one host and image), one more process per policy at a time (alternating again) until

- every speedup's verdict is clear at :data:`STOP_LEVEL` (99 %: each look after a process
  is a chance of a false verdict), or clear at 95 % and gross (:data:`GROSS`: at least 2×
  either way, which no difference between processes measured here comes near), or
- each is clearly no difference (its 95 % interval within ``±target``, default ±3 %, around
  1) or clear, and the processes of each policy agree (their medians spread no wider than a
  noisy IQR),

up to ``max`` processes per policy and a time budget per host (no round starts that would
end after ``budget_s`` of the host's run). The rule is :func:`stop`; the report's verdict is
the 95 % interval where it stopped.

The decision is a pure function of the group's records (:func:`decide`); the groups and
their rounds of cells are planned by :mod:`mxbench.cells.rounds`, and the budget is the
orchestrator's (:mod:`mxbench.orchestrate` runs the rounds). So ``--resume`` replays it over
the stored records, reusing every finished process and adding only what is still needed.
Each added process's record says why it was added (``run.repeats``); ``mxbench run`` says
where each group stopped and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import msgspec

from mxbench import stats
from mxbench.matrix.params import BASELINE
from mxbench.records.record import Record
from mxbench.records.summary import paired, processes

AUTO = "auto"  # the benchmark.repeats value that asks for this

Why = Literal["more", "verdict clear", "target met", "cap", "budget", "no baseline", "failed"]


class AutoRepeats(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How ``repeats: auto`` adds processes (``benchmark.auto_repeats`` in the matrix)."""

    start: int = 2
    target: float = 0.03
    max: int = 6
    budget_s: float = 1800.0

    def describe(self) -> str:
        return (
            f"{self.start} processes per cell to start, then one more per policy (a paired "
            "process measures them together) until the verdict is clear (its "
            f"{STOP_LEVEL:.0%} interval excludes no difference, or its 95% one where the "
            f"difference is {GROSS:g}x or more) or there is clearly none (the "
            f"95% interval within ±{self.target:.0%}, around 1) and the processes agree; at "
            f"most {self.max} per cell, no new round after "
            f"{self.budget_s:g} s on a host"
        )


LIMITS = {"start": (2, 100), "max": (2, 100)}


def check_auto(cfg: AutoRepeats) -> AutoRepeats:
    """The settings, or ValueError saying which is out of range."""
    for name, (low, high) in LIMITS.items():
        if not low <= getattr(cfg, name) <= high:
            raise ValueError(f"{name} must be between {low} and {high}")
    if cfg.start > cfg.max:
        raise ValueError(f"start {cfg.start} is above max {cfg.max}")
    if not 0 < cfg.target < 1:
        raise ValueError("target must be above 0 and below 1 (0.03: the interval within ±3%)")
    if not cfg.budget_s > 0:
        raise ValueError("budget_s must be above 0")
    return cfg


@dataclass(frozen=True)
class Decision:
    """Where a group stands after a round: ``more`` (add a process per policy) or why not."""

    why: Why
    processes: int  # ok processes per policy (the fewest)
    width: float | None = None  # the widest interval's half-width (0.03: ±3 %)
    detail: str = ""

    @property
    def more(self) -> bool:
        return self.why == "more"

    def text(self) -> str:
        """``3 processes per policy, interval ±5.2%: more (wider than ±3%)``."""
        width = f", interval ±{self.width:.1%}" if self.width is not None else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.processes} processes per policy{width}: {self.why}{detail}"


def width(ratio: stats.Ratio) -> float:
    """An interval's half-width as a share (``±3 %``): the geometric half of high / low."""
    return math.sqrt(ratio.high / ratio.low) - 1 if ratio.low > 0 else math.inf


def decide(cfg: AutoRepeats, by_policy: dict[str, list[Record]], attempts: int) -> Decision:
    """After a round: more processes, or why not (the budget aside). ``by_policy``: each
    policy's records (every attempt), ``attempts``: processes started per policy so far."""
    ok = {p: [r for r in recs if r.step is not None] for p, recs in by_policy.items()}
    n = min((len(v) for v in ok.values()), default=0)
    if BASELINE not in ok or len(ok) < 2:
        return Decision("no baseline", n, detail=f"no {BASELINE} to compare with")
    empty = [p for p, v in ok.items() if not v]
    if empty:  # out of memory, unsupported, or failing: more of the same will not help
        return Decision("failed", n, detail=f"{empty[0]} has no timed process")
    ratios = [speedup(ok[BASELINE], ok[p]) for p in ok if p != BASELINE]
    firm = [speedup(ok[BASELINE], ok[p], STOP_LEVEL) for p in ok if p != BASELINE]
    wide = max((width(r) if r is not None and r.judged else math.inf for r in ratios),
               default=math.inf)  # fmt: skip
    shown = wide if math.isfinite(wide) else None
    spread = {
        p: stats.repeats_disagree([m for r in v if r.step and (m := r.step.median)])
        for p, v in ok.items()
        if not _paired(v)
    }
    split = {p: s for p, s in spread.items() if s is not None}
    why = stop(cfg, ratios, firm, attempts, bool(split))
    if why == "verdict clear":
        said = ", ".join(f"{r.verdict} ({r.text()})" for r in ratios if r is not None)
        return Decision(why, n, shown, said)
    if why == "target met":
        return Decision(why, n, shown)
    if why == "cap":
        return Decision(why, n, shown, f"auto_repeats.max {cfg.max} reached")
    if split:
        p, s = max(split.items(), key=lambda kv: kv[1])
        return Decision("more", n, shown, f"{p}'s processes differ by {s:.0%}")
    target = f"±{cfg.target:.0%}"
    return Decision("more", n, shown, f"wider than {target}" if shown else "no interval yet")


def stop(
    cfg: AutoRepeats,
    ratios: list[stats.Ratio | None],
    firm: list[stats.Ratio | None],
    attempts: int,
    split: bool = False,
) -> Why:
    """The rule itself, from a group's speedups (``ratios`` at 95 %, ``firm`` the same at
    :data:`STOP_LEVEL`) after ``attempts`` processes per policy: ``verdict clear`` when every
    firm one excludes no difference (or is gross, :data:`GROSS`, and clear at 95 %);
    ``target met`` when each policy's is either that or a precise "no clear difference" (its
    95 % interval within ``±target`` and around 1: a narrow interval that says faster at
    95 % but not at 99 % is no clear answer yet), and no policy's processes disagree
    (``split``); ``cap`` at ``max``; else ``more``.
    benchmarks/paired_interval_calibration.py runs it after every process."""
    if firm and all(_clear(f) or _gross(r) for r, f in zip(ratios, firm, strict=True)):
        return "verdict clear"
    settled = [_clear(f) or _none(r, cfg.target) for r, f in zip(ratios, firm, strict=True)]
    if settled and all(settled) and not split:
        return "target met"
    return "cap" if attempts >= cfg.max else "more"


def _clear(r: stats.Ratio | None) -> bool:
    return r is not None and r.judged and r.verdict in CLEAR


def _gross(r: stats.Ratio | None) -> bool:
    """Clear at 95 % and at least :data:`GROSS` either way."""
    return _clear(r) and r is not None and max(r.value, 1 / r.value) >= GROSS


def _none(r: stats.Ratio | None, target: float) -> bool:
    """Clearly no difference: a 95 % interval around 1 within ``±target``."""
    return r is not None and r.judged and r.verdict == stats.SAME and width(r) <= target


CLEAR = (stats.FASTER, stats.SLOWER)  # a verdict that more processes are not needed for
# Stopping when a verdict appears is a look at the data after every process: each look at
# 95 % would add its own chance of a false verdict. A group stops early only when the 99 %
# interval already excludes no difference; the report's interval stays the 95 % one, and the
# last look (at max) is at 95 %. With the paired interval's floor (stats.DRIFT) the looks of
# the defaults (start 2, max 6) keep the whole run's A/A false verdicts within 5 % where
# processes differ by SD 0.05-0.09 and rounds by 0.10-0.25: 4.95 % where processes differ
# most and rounds least, 4.7 % of it the last look's own (at 99.5 %: 4.8 %, for half a
# process more to find a 1.3x): benchmarks/paired_interval_calibration.py, docs/measuring.md.
STOP_LEVEL = 0.99
# A gross difference stops at the 95 % verdict: at 2 processes the 99 % interval has one
# degree of freedom (t 63.7) and never excludes 1, so an answer of 10× (bfloat16 emulated on
# a CPU without a bf16 path) would pay a third process for nothing. A 2× ratio is log 0.69:
# 7.7 SD of the largest spread between processes measured here (0.09 in the log ratio), 3.6
# of the shift a bursty load gave (1.78× quiet, 1.47× loaded). The A/A and 1.3× rows of the
# calibration are unchanged by it (benchmarks/paired_interval_calibration.py runs it).
GROSS = 2.0


def _paired(records: list[Record]) -> bool:
    return any(r.pairing is not None for r in records)


def speedup(
    base: list[Record], other: list[Record], level: float = stats.LEVEL
) -> stats.Ratio | None:
    """The speedup the report gives these records (at ``level``): paired processes' own
    ratios when every one of ``other`` was paired, else the processes of the two sides."""
    together = paired(other)
    if together is not None:
        return stats.judge_paired([together], level)[0]
    return stats.judge([(processes(base), processes(other))], level)[0]


def stopped(by_policy: dict[str, list[Record]]) -> Decision | None:
    """Where a comparison of a finished ``repeats: auto`` run stopped, from its records
    alone (each carries the run's settings, ``run.auto_repeats``); None when they were not
    measured under ``auto``. Still wanting more means the run's time budget, or an
    interruption, ended it (``budget``)."""
    found = [r.run.get("auto_repeats") for recs in by_policy.values() for r in recs]
    try:
        cfg = check_auto(msgspec.convert(next(c for c in found if c), AutoRepeats))
    except (StopIteration, msgspec.ValidationError, ValueError):
        return None
    attempts = max((len(recs) for recs in by_policy.values()), default=0)
    decision = decide(cfg, by_policy, attempts)
    if decision.more:
        return replace(
            decision,
            why="budget",
            detail=f"the run's time budget or an interruption ended it; {decision.detail}",
        )
    return decision
