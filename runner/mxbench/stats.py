"""How sure a speedup is: the ratio of medians with a bootstrap interval, and a verdict.

mxbench's answer is a ratio (float32 median / policy median). Printed bare, "1.07" on a
noisy machine reads as a speedup even when the two policies' step times overlap. Here the
ratio gets a 95 % percentile-bootstrap interval (hyperfine and asv report uncertainty the
same spirit): resampled over repeats when a cell was measured in at least
:data:`MIN_REPEATS` fresh processes (the variation that matters: process to process),
else over the timed steps of one process (which understates it, and says so). A fixed seed
makes every report reproducible. Resampling sorted data by rank (:func:`_middle_ranks`)
gives exactly the bootstrap distribution of the median at a fraction of the cost.
The verdict is *faster* / *slower* only when the interval
excludes 1.0, else *no clear difference*.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

MIN_REPEATS = 3
RESAMPLES = 1000
LEVEL = 0.95
SEED = 20200113  # the blog post's date: any fixed value makes reports reproducible
# A cell whose interquartile range exceeds this share of its median is flagged noisy.
NOISY_IQR = 0.20

Verdict = Literal["faster", "slower", "no clear difference"]
Over = Literal["repeats", "steps"]


@dataclass(frozen=True)
class Ratio:
    """``value`` = median(base) / median(other): above 1, ``other`` is faster."""

    value: float
    low: float
    high: float
    over: Over
    n: int  # resampled units on the smaller side

    @property
    def verdict(self) -> Verdict:
        if self.low > 1.0:
            return "faster"
        if self.high < 1.0:
            return "slower"
        return "no clear difference"

    def text(self) -> str:
        """``1.07 [1.03–1.11]``."""
        return f"{self.value:.2f} [{self.low:.2f}–{self.high:.2f}]"


Samples = Sequence[Sequence[float]]  # one list of step times (ms) per repeat


def speedup(base: Samples, other: Samples) -> Ratio | None:
    """The speedup of ``other`` over ``base``, each given as the step times (ms) of every
    repeat (one list per fresh process). None when either side has no positive sample."""
    return speedups([(base, other)])[0]


def speedups(pairs: Sequence[tuple[Samples, Samples]]) -> list[Ratio | None]:
    """:func:`speedup` of many pairs at once (a report has thousands): pairs with the same
    numbers of units are resampled together, as matrices."""
    out: list[Ratio | None] = [None] * len(pairs)
    groups: dict[tuple[int, int, Over], list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for i, (base, other) in enumerate(pairs):
        units = _units(base, other)
        if units is None:
            continue
        b, o, over = units
        if min(b.size, o.size) < 2:
            value = float(np.median(b) / np.median(o))
            out[i] = Ratio(value, value, value, over, int(min(b.size, o.size)))
            continue
        groups.setdefault((b.size, o.size, over), []).append((i, b, o))
    for (nb, no, over), members in groups.items():
        for start in range(0, len(members), _CHUNK):
            chunk = members[start : start + _CHUNK]
            xb = np.sort(np.stack([b for _, b, _ in chunk]), axis=1)
            xo = np.sort(np.stack([o for _, _, o in chunk]), axis=1)
            values = (_medians(xb) / _medians(xo)).tolist()
            ratio = _boot_medians(xb, nb, 0) / _boot_medians(xo, no, 1)
            lo_k, hi_k = _TAILS
            part = np.partition(ratio, [lo_k, hi_k], axis=1)
            lows, highs = part[:, lo_k].tolist(), part[:, hi_k].tolist()
            for row, (i, _, _) in enumerate(chunk):
                out[i] = Ratio(
                    values[row],
                    lows[row],
                    highs[row],
                    over,
                    min(nb, no),
                )
    return out


_CHUNK = 2048
_TAILS = (int(RESAMPLES * (1 - LEVEL) / 2), int(RESAMPLES * (1 + LEVEL) / 2) - 1)


def _units(base: Samples, other: Samples) -> tuple[np.ndarray, np.ndarray, Over] | None:
    b = [r for r in (np.asarray([x for x in s if x > 0], dtype=float) for s in base) if r.size]
    o = [r for r in (np.asarray([x for x in s if x > 0], dtype=float) for s in other) if r.size]
    if not b or not o:
        return None
    if min(len(b), len(o)) >= MIN_REPEATS:
        mid = [float(np.median(r)) for r in b], [float(np.median(r)) for r in o]
        return np.array(mid[0]), np.array(mid[1]), "repeats"
    return np.concatenate(b), np.concatenate(o), "steps"


@cache
def _middle_ranks(n: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """For RESAMPLES bootstrap samples of n values (seeded by n and the side): the ranks of
    the two middle values of each. The median of a resample of *sorted* data x is then
    (x[k1] + x[k2]) / 2: the same bootstrap, without resampling the data itself."""
    rng = np.random.default_rng((SEED, n, side))
    idx = np.sort(rng.integers(0, n, size=(RESAMPLES, n)), axis=1)
    return idx[:, (n - 1) // 2], idx[:, n // 2]


def _medians(sorted_rows: np.ndarray) -> np.ndarray:
    n = sorted_rows.shape[1]
    out: np.ndarray = (sorted_rows[:, (n - 1) // 2] + sorted_rows[:, n // 2]) / 2
    return out


def _boot_medians(sorted_rows: np.ndarray, n: int, side: int) -> np.ndarray:
    k1, k2 = _middle_ranks(n, side)
    out: np.ndarray = (sorted_rows[:, k1] + sorted_rows[:, k2]) / 2
    return out


def noisy(median: float | None, p25: float | None, p75: float | None) -> float | None:
    """The IQR as a share of the median when it is wide enough to flag, else None."""
    if not median or p25 is None or p75 is None:
        return None
    share = (p75 - p25) / median
    return share if share > NOISY_IQR else None


def repeats_disagree(medians: Sequence[float]) -> float | None:
    """The spread of the repeats' medians (max - min) as a share of their median, when
    fresh processes disagree by more than a noisy IQR would (else None)."""
    if len(medians) < 2:
        return None
    mid = statistics.median(medians)
    share = (max(medians) - min(medians)) / mid if mid else 0.0
    return share if share > NOISY_IQR else None
