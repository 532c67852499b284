"""How sure a speedup is: the ratio of medians with a bootstrap interval, and a verdict.

mxbench's answer is a ratio (float32 median / policy median). Printed bare, "1.07" on a
noisy machine reads as a speedup even when the two policies' step times overlap. Here the
ratio gets a 95 % percentile-bootstrap interval (hyperfine and asv report uncertainty the
same spirit): resampled over repeats when a cell was measured in at least
:data:`MIN_REPEATS` fresh processes (the variation that matters: process to process),
else over the timed steps of one process (which understates it, and says so). A fixed seed
makes every report reproducible. The verdict is *faster* / *slower* only when the interval
excludes 1.0, else *no clear difference*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

MIN_REPEATS = 3
RESAMPLES = 2000
LEVEL = 0.95
SEED = 20200113  # the blog post's date: any fixed value makes reports reproducible
# A cell whose interquartile range exceeds this share of its median is flagged noisy.
NOISY_IQR = 0.20

Verdict = Literal["faster", "slower", "no clear difference"]


@dataclass(frozen=True)
class Ratio:
    """``value`` = median(base) / median(other): above 1, ``other`` is faster."""

    value: float
    low: float
    high: float
    over: Literal["repeats", "steps"]
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


def speedup(
    base: Sequence[Sequence[float]], other: Sequence[Sequence[float]], seed: int = SEED
) -> Ratio | None:
    """The speedup of ``other`` over ``base``, each given as the step times (ms) of every
    repeat (one list per fresh process). None when either side has no positive sample."""
    b = [np.asarray([x for x in r if x > 0], dtype=float) for r in base]
    o = [np.asarray([x for x in r if x > 0], dtype=float) for r in other]
    b, o = [r for r in b if r.size], [r for r in o if r.size]
    if not b or not o:
        return None
    rng = np.random.default_rng(seed)
    if min(len(b), len(o)) >= MIN_REPEATS:
        units_b = np.array([np.median(r) for r in b])
        units_o = np.array([np.median(r) for r in o])
        over: Literal["repeats", "steps"] = "repeats"
    else:
        units_b, units_o = np.concatenate(b), np.concatenate(o)
        over = "steps"
    value = float(np.median(units_b) / np.median(units_o))
    if min(units_b.size, units_o.size) < 2:
        return Ratio(value, value, value, over, int(min(units_b.size, units_o.size)))
    boot_b = np.median(rng.choice(units_b, (RESAMPLES, units_b.size)), axis=1)
    boot_o = np.median(rng.choice(units_o, (RESAMPLES, units_o.size)), axis=1)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(boot_b / boot_o, [tail, 100 - tail])
    return Ratio(value, float(low), float(high), over, int(min(units_b.size, units_o.size)))


def noisy(median: float | None, p25: float | None, p75: float | None) -> float | None:
    """The IQR as a share of the median when it is wide enough to flag, else None."""
    if not median or p25 is None or p75 is None:
        return None
    share = (p75 - p25) / median
    return share if share > NOISY_IQR else None
