"""What the machine was doing while a comparison was timed, in words (measured by the paired
design's interference probe: :mod:`mxbench.bench.evidence.interference`)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from mxbench import stats
from mxbench.records import summary
from mxbench.records.record import Record

# From these on the diagnosis says the machine was in use (a share of the rounds disturbed,
# or other processes' CPU in cores).
BUSY_ROUNDS = 0.25
BUSY_CORES = 0.25


@dataclass(frozen=True)
class Busy:
    others_cores: float  # other processes' CPU during the windows (median over windows)
    steal_cores: float
    rounds: int
    disturbed: int  # rounds with a disturbed window

    @property
    def share(self) -> float:
        return self.disturbed / self.rounds if self.rounds else 0.0

    @property
    def busy(self) -> bool:
        return self.share >= BUSY_ROUNDS or self.others_cores >= BUSY_CORES

    def text(self) -> str:
        """``other processes held 31% of a CPU (5 of 24 rounds disturbed)``."""
        out = f"other processes held {self.others_cores:.0%} of a CPU"
        if self.steal_cores >= 0.01:
            out += f" and the hypervisor stole {self.steal_cores:.0%}"
        return out + f" ({self.disturbed} of {self.rounds} rounds disturbed)"


def busy(records: Iterable[Record]) -> Busy | None:
    """Over the paired records given (a slot's, a comparison's): None when none has windows."""
    others: list[float] = []
    steal: list[float] = []
    rounds = disturbed = 0
    for r in records:
        pair = r.pairing
        if pair is None or not pair.windows or not pair.clean:
            continue
        for w in pair.windows:
            others.append(w.interference.others_cores or 0.0)
            steal.append(w.interference.steal_cores or 0.0)
        rounds += len(pair.clean)
        disturbed += sum(1 for ok in pair.clean if not ok)
    if not others:
        return None
    return Busy(statistics.median(others), statistics.median(steal), rounds, disturbed)


def as_measured(records: Iterable[Record]) -> stats.Ratio | None:
    """The speedup the arm's rounds give as measured, where its verdict was judged from
    windows given back the CPU other processes took (``pairing.idle_ratios``,
    :mod:`mxbench.stats.load`); None where no record of them was."""
    records = list(records)
    if not any(r.pairing is not None and r.pairing.idle_ratios for r in records):
        return None
    procs = summary.paired(records, measured=True)
    return stats.judge_paired([procs])[0] if procs else None
