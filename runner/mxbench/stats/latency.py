"""Latency percentiles that say how much they rest on: order statistics, no distribution.

A serving latency's p50 / p90 / p99 is a quantile of the per-query times. From n queries
(sorted ``x(1) <= ... <= x(n)``) its estimate is the nearest rank ``x(ceil(q n))``, and its
confidence interval is a pair of order statistics ``[x(l), x(u)]``: the number of queries
faster than the true quantile is binomial ``B ~ Bin(n, q)``, so
``P(x(l) <= quantile <= x(u)) = P(l <= B <= u - 1)`` whatever the distribution of the times
(the distribution-free interval of a quantile). ``l`` and ``u`` are chosen with at most
``(1 - level) / 2`` of that binomial's mass outside on each side.

Where the sample is too small for that, no order statistic bounds the quantile at the level:
the largest of 100 queries is below the true p99 with probability 0.99^100 = 37 %. Such a
percentile is not a figure but "needs N queries": the smallest N with
``max(q, 1 - q)^N <= (1 - level) / 2`` (p99 at 95 %: 368; at 99 %: 528 (459 for a one-sided
bound); p90 at 95 %: 36; p50 at 95 %: 6).

MLPerf Inference asks far more (:func:`mlperf_queries`: p90 at 99 % confidence: 24,576
queries; p99: 270,336): its rule bounds the *error* of the percentile's rank (a margin of
(1 - q) / 20) and rounds up to a multiple of 8,192; the rule here only asks that an interval
exist. Both are said where the report prints percentiles.

**Dependence.** The binomial holds for independent calls. A process's calls are not: a
slow stretch (another process on the core, a clock that drops, a collector) makes several
neighbouring calls slow together: in the committed H200 serving records the lag-1
autocorrelation of the log call times is 0.78-0.96 under JAX. With ``dependent=True`` (the report's
choice) the interval is the binomial's over the *effective* calls,
``n (1 - rho) / (1 + rho)``, rho the lag-1 autocorrelation of the indicator "this call took
at most the percentile" (the series whose count the binomial describes; clipped to
[0, 0.95]), its ranks scaled back to the n calls; a percentile they cannot support needs as
many more calls. Processes differ by more than their calls say (the drift study in
docs/measuring.md), so across several processes (:func:`across`) the percentile is each
process's own, the figure their geometric mean and the interval Student's t over processes
of their logs, each process's spread floored at what its own interval says: the same two
levels as the step times' intervals (:mod:`mxbench.stats`). A block bootstrap would handle
the dependence inside a process but not the processes' own offsets, and resampling 2-3
processes has too few distinct draws to hold a level.

Pure Python (math) but :func:`across` (scipy's t quantile, imported when it runs): the bench
computes percentiles inside an image, the report from the samples.
"""

from __future__ import annotations

import functools
import math
import operator
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# The percentiles a serving cell reports, and the level of their intervals.
QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
LEVEL = 0.95
MLPERF_LEVEL = 0.99
MLPERF_ROUND = 1 << 13  # MLPerf rounds its query counts up to a multiple of 8,192


@dataclass(frozen=True)
class Percentile:
    """One quantile of ``n`` times: its value and interval (ms), or None where ``n`` cannot
    support it at ``level`` (``needs``: the queries that would, per process). ``counts``:
    the calls of each process it comes from, where more than one (:func:`across`)."""

    q: float
    n: int
    level: float
    needs: int
    value: float | None = None
    low: float | None = None
    high: float | None = None
    counts: tuple[int, ...] = ()

    @property
    def supported(self) -> bool:
        return self.value is not None

    @property
    def name(self) -> str:
        return name(self.q)

    @property
    def processes(self) -> int:
        return max(1, len(self.counts))

    @property
    def over(self) -> str:
        """What its interval is over: ``processes`` (two or more), else ``calls`` (one)."""
        return "processes" if self.processes > 1 else "calls"

    def text(self, places: int = 2) -> str:
        """``1.23 [1.20–1.31] (n=500)``, ``… (n=2×250)`` over two processes, or
        ``needs 368 queries (n=100)`` (``… queries a process`` over several)."""
        calls = f"n={self.n}"
        if self.processes > 1:
            same = len(set(self.counts)) == 1
            calls = (
                f"n={self.processes}×{self.counts[0]}"
                if same
                else "n=" + "+".join(map(str, self.counts))
            )
        if self.value is None or self.low is None or self.high is None:
            each = " a process" if self.processes > 1 else ""
            return f"needs {self.needs} queries{each} ({calls})"
        return f"{self.value:.{places}f} [{self.low:.{places}f}–{self.high:.{places}f}] ({calls})"


def name(q: float) -> str:
    """``p50``, ``p90``, ``p99``, ``p99.9``."""
    return "p" + f"{q * 100:.10g}"


def min_queries(q: float, level: float = LEVEL) -> int:
    """The fewest queries whose order statistics bound the ``q`` quantile on both sides at
    ``level``: the smallest n with ``max(q, 1 - q)^n <= (1 - level) / 2``."""
    _check(q, level)
    tail = (1.0 - level) / 2.0
    n = math.ceil(math.log(tail) / math.log(max(q, 1.0 - q)))
    while max(q, 1.0 - q) ** n > tail:  # rounding in the logs: the rule, not its estimate
        n += 1
    while n > 1 and max(q, 1.0 - q) ** (n - 1) <= tail:
        n -= 1
    return n


def mlperf_queries(q: float, level: float = MLPERF_LEVEL) -> int:
    """MLPerf Inference's query count for the ``q`` latency percentile: the normal
    approximation's n for a margin of ``(1 - q) / 20`` on the percentile's rank at ``level``,
    rounded up to a multiple of 8,192 (p90: 24,576; p99: 270,336)."""
    _check(q, level)
    z = statistics.NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)
    margin = (1.0 - q) / 20.0
    n = math.ceil(z * z * q * (1.0 - q) / (margin * margin))
    return -(-n // MLPERF_ROUND) * MLPERF_ROUND


def binomial_cdf(n: int, q: float) -> list[float]:
    """``P(B <= k)`` for k = 0..n, ``B ~ Bin(n, q)`` (exact, in log space: no underflow
    for the large n of long runs)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q {q!r}: a probability strictly between 0 and 1")
    lq, lp = math.log(q), math.log1p(-q)
    total, out = 0.0, []
    base = math.lgamma(n + 1)
    for k in range(n + 1):
        total += math.exp(
            base - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * lp
        )
        out.append(min(total, 1.0))
    return out


@functools.lru_cache(maxsize=4096)
def bounds(n: int, q: float, level: float = LEVEL) -> tuple[int, int] | None:
    """1-based ranks ``(l, u)`` of the order statistics that bound the ``q`` quantile of
    ``n`` times at ``level`` (at most ``(1 - level) / 2`` outside on each side); None when
    ``n`` is below :func:`min_queries`. Found once for each (n, q, level): a report's
    processes mostly make as many calls as each other (the binomial sums were a third of a
    serving fleet's report)."""
    _check(q, level)
    if n < min_queries(q, level):
        return None
    tail = (1.0 - level) / 2.0
    cdf = binomial_cdf(n, q)
    # l: the largest rank with P(B <= l - 1) <= tail; u: the smallest with P(B >= u) <= tail
    # (n >= min_queries: rank 1 and rank n qualify but for rounding in the sums)
    low = max((k + 1 for k in range(n) if cdf[k] <= tail), default=1)
    high = min((k + 1 for k in range(n) if 1.0 - cdf[k] <= tail), default=n)
    return low, high


MAX_RHO = 0.95  # the lag-1 autocorrelation taken at most (as mxbench.stats does for steps)


def effective_calls(
    times: Sequence[float], q: float, ordered: Sequence[float] | None = None
) -> float:
    """How many independent calls ``times`` (in call order) are worth for the ``q``
    quantile: ``n (1 - rho) / (1 + rho)``, rho the lag-1 autocorrelation of the indicator
    "at most the nearest-rank quantile", clipped to [0, :data:`MAX_RHO`] (negative rho is
    not taken as extra precision). ``ordered``: ``times`` sorted, where the caller has it."""
    n = len(times)
    if n < 3:
        return float(n)
    cut = (sorted(times) if ordered is None else ordered)[max(1, math.ceil(q * n)) - 1]
    # the indicator takes two values once centred, 1 - mean and -mean: its sums are counts
    # (of ones, and of neighbouring pairs by kind), not a loop over the calls in Python
    below = list(map(cut.__ge__, times))
    ones = sum(below)
    both = sum(map(operator.and_, below, below[1:]))  # neighbours both at most the cut
    either = sum(map(operator.or_, below, below[1:]))
    hi, lo = 1.0 - ones / n, -ones / n
    den = ones * hi * hi + (n - ones) * lo * lo
    num = both * hi * hi + (either - both) * hi * lo + (n - 1 - either) * lo * lo
    rho = num / den if den > 0 else 0.0
    rho = min(max(rho, 0.0), MAX_RHO)
    return n * (1.0 - rho) / (1.0 + rho)


def nearest(times: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``times`` (not empty) by nearest rank: ``x(ceil(q n))``."""
    return sorted(times)[max(1, math.ceil(q * len(times))) - 1]


def percentile(
    times: Sequence[float],
    q: float,
    level: float = LEVEL,
    dependent: bool = False,
    ordered: Sequence[float] | None = None,
) -> Percentile:
    """The ``q`` quantile of ``times`` (nearest rank) with its order-statistic interval, or
    the queries it needs. ``dependent``: the interval of :func:`effective_calls` calls, its
    ranks scaled to the ``n`` there are (none where the effective calls cannot support it:
    it needs as many more). ``ordered``: ``times`` sorted, where the caller has it."""
    n = len(times)
    needs = min_queries(q, level)
    ordered = sorted(times) if ordered is None else ordered
    m = effective_calls(times, q, ordered) if dependent and n else float(n)
    whole = math.floor(m + 1e-9)
    ranks = bounds(whole, q, level) if whole else None
    if ranks is None:
        more = math.ceil(needs * n / m - 1e-9) if dependent and m > 0 else needs
        return Percentile(q, n, level, max(needs, more))
    rank = max(1, math.ceil(q * n))
    low, high = ranks
    if whole != n:  # ranks among the effective calls, scaled to the calls there are
        low, high = max(1, math.floor(low * n / whole)), min(n, math.ceil(high * n / whole))
    return Percentile(q, n, level, needs, ordered[rank - 1], ordered[low - 1], ordered[high - 1])


def percentiles(
    times: Sequence[float], quantiles: Sequence[float] = QUANTILES, level: float = LEVEL
) -> list[Percentile]:
    return [percentile(times, q, level) for q in quantiles]


def across(
    samples: Sequence[Sequence[float]],
    q: float,
    level: float = LEVEL,
    ordered: Sequence[Sequence[float]] | None = None,
) -> Percentile:
    """The ``q`` quantile of several processes' calls (each in call order): one process,
    its own (``dependent``); several, the geometric mean of each process's own with
    Student's t interval over processes of their logs (k - 1 degrees of freedom), the spread
    floored at the mean of what each process's own interval says (its half-width in logs
    over the normal quantile). A process that cannot support it makes the whole unsupported
    (``needs``: per process, the most any of them needs)."""
    each = ordered if ordered is not None else [sorted(s) for s in samples]
    procs = [
        percentile(s, q, level, dependent=True, ordered=o)
        for s, o in zip(samples, each, strict=True)
        if len(s)
    ]
    if not procs:
        return Percentile(q, 0, level, min_queries(q, level))
    if len(procs) == 1:
        return procs[0]
    counts = tuple(p.n for p in procs)
    total = sum(counts)
    short = [p.needs for p in procs if not p.supported]
    if short:
        return Percentile(q, total, level, max(short), counts=counts)
    z = statistics.NormalDist().inv_cdf((1.0 + level) / 2.0)
    logs = [math.log(p.value) for p in procs]  # type: ignore[arg-type]  # supported
    within = statistics.fmean(
        ((math.log(p.high) - math.log(p.low)) / (2.0 * z)) ** 2  # type: ignore[arg-type]
        for p in procs
    )
    k = len(procs)
    mean = statistics.fmean(logs)
    se = math.sqrt(max(statistics.variance(logs), within) / k)
    from scipy.special import stdtrit  # Student's t quantile (imported when needed)

    t = float(stdtrit(k - 1, (1.0 + level) / 2.0))
    return Percentile(
        q, total, level, min_queries(q, level), math.exp(mean), math.exp(mean - t * se),
        math.exp(mean + t * se), counts,
    )  # fmt: skip


def _check(q: float, level: float) -> None:
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q!r}: strictly between 0 and 1")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level {level!r}: strictly between 0 and 1")
