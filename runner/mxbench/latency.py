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

Pure Python (math): the bench computes these inside an image, the report from the samples.
"""

from __future__ import annotations

import math
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
    support it at ``level`` (``needs``: the queries that would)."""

    q: float
    n: int
    level: float
    needs: int
    value: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def supported(self) -> bool:
        return self.value is not None

    @property
    def name(self) -> str:
        return name(self.q)

    def text(self, places: int = 2) -> str:
        """``1.23 [1.20–1.31] (n=500)``, or ``needs 368 queries (n=100)``."""
        if self.value is None or self.low is None or self.high is None:
            return f"needs {self.needs} queries (n={self.n})"
        return (
            f"{self.value:.{places}f} [{self.low:.{places}f}–{self.high:.{places}f}] (n={self.n})"
        )


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


def bounds(n: int, q: float, level: float = LEVEL) -> tuple[int, int] | None:
    """1-based ranks ``(l, u)`` of the order statistics that bound the ``q`` quantile of
    ``n`` times at ``level`` (at most ``(1 - level) / 2`` outside on each side); None when
    ``n`` is below :func:`min_queries`."""
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


def percentile(times: Sequence[float], q: float, level: float = LEVEL) -> Percentile:
    """The ``q`` quantile of ``times`` (nearest rank) with its order-statistic interval, or
    the queries it needs."""
    n = len(times)
    needs = min_queries(q, level)
    ranks = bounds(n, q, level) if n else None
    if ranks is None:
        return Percentile(q, n, level, needs)
    ordered = sorted(times)
    rank = max(1, math.ceil(q * n))
    low, high = ranks
    return Percentile(q, n, level, needs, ordered[rank - 1], ordered[low - 1], ordered[high - 1])


def percentiles(
    times: Sequence[float], quantiles: Sequence[float] = QUANTILES, level: float = LEVEL
) -> list[Percentile]:
    return [percentile(times, q, level) for q in quantiles]


def _check(q: float, level: float) -> None:
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q!r}: strictly between 0 and 1")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level {level!r}: strictly between 0 and 1")
