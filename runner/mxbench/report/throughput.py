"""Ratios of the throughput a table prints, with an interval over processes.

The scaling map prints images/s (each slot's median over its processes of the images/s over
their timed windows, :meth:`mxbench.report.tables.Entry.images_per_s`) and figures made from
it: the efficiency ``T_N / (N * T_1)`` and the share of independent replicas' throughput that
data parallel keeps. Such a figure is the ratio of the printed throughputs, exactly (a reader
can check it from the table's own columns). A window's images/s counts every step of it,
stray slow ones included, where a step median leaves them out: the two can differ by more
than the interval (a map that printed 137 % from its columns once said 124 % from step
medians).

Its interval is a speedup's (:func:`mxbench.stats.judge`) on the processes' log images/s:
Welch's t over processes, each side's spread floored at what the processes' own steps say
(one process on a side: the steps' normal interval, and no verdict), around the log of the
printed ratio. The printed figures are medians, not means, over processes: a median of k >= 3
values varies more than their mean (for normal values by up to pi/2 in variance, its limit),
so each side's variance is taken :data:`MEDIAN_FACTOR` times larger there. Simulated with
process SDs of 0.05-0.09 in the log rate, the interval then holds the truth in 97.0-98.2 % of
tables at k = 2...6 a side, and 92.2-93.9 % at k = 5 and 6 without the factor
(``benchmarks/scaling_interval.py``, ``benchmarks/records/scaling-interval.md``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from mxbench import stats
from mxbench.records import summary
from mxbench.records.record import Record


def rates(records: Sequence[Record], batch: int) -> list[stats.Process]:
    """Each ok process's images/s over its timed window and the variance of its log that
    its steps give (:func:`mxbench.records.summary.process`; 0 without samples); where no record has
    a window's images/s, ``batch`` examples over its median step (as
    :meth:`~mxbench.report.tables.Entry.images_per_s` falls back)."""
    ok = [r for r in records if r.status == "ok"]
    windowed = [r for r in ok if r.metrics.images_per_s]
    if windowed:
        out = []
        for r in windowed:
            p = summary.process(r)
            out.append((float(r.metrics.images_per_s or 0.0), p[1] if p is not None else 0.0))
        return out
    return [(batch * 1000.0 / p[0], p[1]) for r in ok if (p := summary.process(r)) and p[0] > 0]


MEDIAN_FACTOR = math.pi / 2  # a median of k >= 3 values' variance over their mean's, at most


def ratios(
    wanted: Sequence[tuple[Sequence[stats.Process], Sequence[stats.Process], float | None]],
) -> list[stats.Ratio | None]:
    """Per (the numerator's processes (:func:`rates`), the denominator's, the printed
    ratio): that ratio with its interval (None where a side has no process or nothing was
    printed)."""
    return [ratio(num, den, value) if num and den and value else None
            for num, den, value in wanted]  # fmt: skip


def ratio(
    num: Sequence[stats.Process], den: Sequence[stats.Process], value: float,
    level: float = stats.LEVEL,
) -> stats.Ratio:  # fmt: skip
    """``value`` (the printed ratio of the medians of ``num``'s and ``den``'s rates) with
    the interval of the module's rule."""
    sides = []
    for procs in (num, den):
        k = len(procs)
        logs = [math.log(rate) for rate, _ in procs]
        within = statistics.fmean(v for _, v in procs)
        spread = max(statistics.variance(logs), within) if k >= stats.MIN_PROCESSES else within
        sides.append((spread / k * (MEDIAN_FACTOR if k >= 3 else 1.0), k))
    (a, ka), (b, kb) = sides
    se = math.sqrt(a + b)
    judged = min(ka, kb) >= stats.MIN_PROCESSES
    if judged:
        from scipy.special import stdtrit  # Student's t quantile (imported when needed)

        den_df = a * a / (ka - 1) + b * b / (kb - 1)
        df = (a + b) ** 2 / den_df if den_df > 0 else float(ka + kb - 2)
        q = float(stdtrit(df, (1 + level) / 2))
    else:
        q = statistics.NormalDist().inv_cdf((1 + level) / 2)
    over: stats.Over = "processes" if judged else "steps"
    half = min(q * se, _LOG_BOUND)  # finite, however few and far apart the processes
    return stats.Ratio(value, value * math.exp(-half), value * math.exp(half), over,
                       min(ka, kb))  # fmt: skip


_LOG_BOUND = 690.0  # as mxbench.stats bounds a ratio's log
