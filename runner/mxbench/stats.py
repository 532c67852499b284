"""How sure a speedup is: a ratio with an interval that holds its level, and a verdict.

mxbench's answer is a ratio (float32's step time / the policy's). Printed bare, "1.07" on a
noisy machine reads as a speedup even when the two policies' step times overlap, and an
interval over the steps of one process is far too narrow: real machines vary from process
to process (clock boost, shared cores, kernels picked by autotuning, memory placement), and
steps within a process are autocorrelated. The interval here has two levels:

- **Within a process** (autocorrelated steps): each process is summarised by the log of its
  median step time and that median's variance, from the steps' robust spread (IQR) and
  their lag-1 autocorrelation: n autocorrelated steps are worth n·(1-ρ)/(1+ρ) independent
  ones (the AR(1) effective sample size), so a run of similar steps does not pass for
  independent evidence. O(n) time and memory per process, whatever ``steps`` is.
- **Between processes** (the unit that matters): the difference of the two policies' mean
  log medians with Welch's t interval on the processes' spread, that spread floored at the
  within-process variance (two processes that agree by chance cannot claim more precision
  than their own steps allow). Student's t is what keeps the level with 2, 3 or 5
  processes, where resampling so few units cannot (a percentile bootstrap over 3 processes
  has only 10 distinct resamples per side; ``benchmarks/calibration.py`` measures both).
- **Paired processes** (both arms in one process, :func:`judge_paired`): each process's
  speedup is the median of its rounds' ratios; the interval is Student's t over those with
  k - 1 degrees of freedom however well the processes agree, their spread floored at
  :data:`DRIFT` times what their rounds say (``benchmarks/paired_interval_calibration.py``
  checks it, ``repeats: auto``'s looks included).

With one process on either side the process-to-process variation cannot be judged at all:
the verdict is :data:`TOO_FEW` (its interval, over steps only, is kept for diagnosis and not
shown as an answer). Otherwise *faster* / *slower* only when the 95 % interval excludes 1.0,
else *no clear difference*. Everything is deterministic: no resampling, no seed.

The verdict vocabulary (:data:`VERDICTS`, :data:`SHORT`) is defined here once; the report,
the DataFrame and ``compare`` import it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

# numpy is imported by the functions that compute (about 70 ms): a report with no interval to
# make, and every command's start, does without it
if TYPE_CHECKING:
    import numpy as np


LEVEL = 0.95
MIN_PROCESSES = 2  # per side, for a verdict
# A cell whose interquartile range exceeds this share of its median is flagged noisy.
NOISY_IQR = 0.20

Verdict = Literal["faster", "slower", "no clear difference", "too few processes"]
FASTER: Final = "faster"
SLOWER: Final = "slower"
SAME: Final = "no clear difference"
TOO_FEW: Final = "too few processes"
VERDICTS: tuple[Verdict, ...] = (FASTER, SLOWER, SAME, TOO_FEW)
# The same verdicts where a table cell has little room: with one process the cell shows the
# bare ratio, and a note under the table says why there is no verdict.
SHORT: dict[str, str] = {FASTER: "faster", SLOWER: "slower", SAME: "≈ same", TOO_FEW: ""}
HINT = "set benchmark.repeats to auto, or 3 or more"  # what gives a TOO_FEW reader a verdict


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean of finite values, any a record admits: where their sum would
    overflow (two of 1e308), each is divided first."""
    try:
        return statistics.fmean(values)
    except OverflowError:
        largest = max(abs(v) for v in values)
        return largest * statistics.fmean([v / largest for v in values])


def figure(value: float, places: int = 2, sign: bool = False) -> str:
    """``value`` with ``places`` decimals (``sign``: a ``+`` before a gain), as every figure
    a report writes; from 1e9 on in scientific notation (``1.2e+302``): a rate or ratio made
    from step times near the record schema's bounds stays a few characters, not hundreds of
    digits."""
    plus = "+" if sign else ""
    return f"{value:{plus}.{places}f}" if abs(value) < 1e9 else f"{value:{plus}.3g}"


Over = Literal["processes", "steps"]


@dataclass(frozen=True)
class Ratio:
    """``value`` = base's step time / other's (geometric mean of the processes' medians):
    above 1, ``other`` is faster. ``low``-``high``: the 95 % interval, over ``processes``
    (a verdict) or, with one process on a side, over its ``steps`` only (no verdict)."""

    value: float
    low: float
    high: float
    over: Over
    n: int  # processes on the smaller side

    @property
    def judged(self) -> bool:
        """Enough processes on both sides for the interval to hold its level."""
        return self.over == "processes"

    @property
    def verdict(self) -> Verdict:
        if not self.judged:
            return TOO_FEW
        if self.low > 1.0:
            return FASTER
        if self.high < 1.0:
            return SLOWER
        return SAME

    def text(self) -> str:
        """``1.07 [1.03–1.11]``; the bare figure when there is no verdict."""
        if not self.judged:
            return figure(self.value)
        return f"{figure(self.value)} [{figure(self.low)}–{figure(self.high)}]"

    def sentence(self, name: str, base: str, where: str = "") -> str:
        """As hyperfine says it: ``mixed_bfloat16 is 1.48× [1.41–1.55] faster than float32
        <where>``; ``… is 1.25× [1.20–1.31] slower than …`` (the inverse ratio);
        ``…: no clear difference from float32 <where> (0.99× [0.95–1.03])``."""
        at = f" {where}" if where else ""
        span = f"[{figure(self.low)}–{figure(self.high)}]"
        verdict = self.verdict
        if verdict == FASTER:
            return f"{name} is {figure(self.value)}× {span} faster than {base}{at}"
        if verdict == SLOWER:
            inv = f"[{figure(1 / self.high)}–{figure(1 / self.low)}]"
            return f"{name} is {figure(1 / self.value)}× {inv} slower than {base}{at}"
        if verdict == SAME:
            return f"{name}: {SAME} from {base}{at} ({figure(self.value)}× {span})"
        speed = f"{figure(self.value)}× the speed of {base}{at}"
        return f"{name}: {speed}, {TOO_FEW} for a verdict ({HINT})"


Samples = Sequence[Sequence[float]]  # one list of step times (ms) per process, in order


def speedup(base: Samples, other: Samples) -> Ratio | None:
    """The speedup of ``other`` over ``base``, each given as the step times (ms) of every
    process (one list per fresh process). None when either side has no positive sample."""
    return speedups([(base, other)])[0]


def speedups(pairs: Sequence[tuple[Samples, Samples]], level: float = LEVEL) -> list[Ratio | None]:
    """:func:`speedup` of many pairs at once (a report has thousands): processes of one
    length are summarised together as a matrix, pairs with the same numbers of processes
    are judged together (at ``level``)."""
    import numpy as np

    rows: list[np.ndarray] = []
    sides: list[tuple[list[int], list[int]]] = []
    for base, other in pairs:
        ends = []
        for side in (base, other):
            first = len(rows)
            for steps in side:
                r = np.asarray([x for x in steps if x > 0], dtype=float)
                if r.size:
                    rows.append(r)
            ends.append(list(range(first, len(rows))))
        sides.append((ends[0], ends[1]))
    med, v = summarise(rows)
    procs = [(med[i], v[i]) for i in range(len(rows))]
    return judge([([procs[i] for i in b], [procs[i] for i in o]) for b, o in sides], level)


Process = tuple[float, float]  # a process's median step time (ms) and its log's variance


def judge(
    pairs: Sequence[tuple[Sequence[Process], Sequence[Process]]], level: float = LEVEL
) -> list[Ratio | None]:
    """:func:`speedups` of pairs whose processes are already summarised (:func:`summarise`:
    a reader keeps two numbers per process, not its steps). None where a side has none."""
    out: list[Ratio | None] = [None] * len(pairs)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (base, other) in enumerate(pairs):
        if base and other:
            groups.setdefault((len(base), len(other)), []).append(i)
    if not groups:
        return out
    import numpy as np

    for (kb, ko), members in groups.items():
        b = np.array([pairs[i][0] for i in members], dtype=float)
        o = np.array([pairs[i][1] for i in members], dtype=float)
        value, low, high, judged = _intervals(b[:, :, 0], b[:, :, 1], o[:, :, 0], o[:, :, 1], level)
        over: Over = "processes" if judged else "steps"
        for row, i in enumerate(members):
            out[i] = Ratio(value[row], low[row], high[row], over, min(kb, ko))
    return out


_LOG_BOUND = 690.0  # ratios stay within e^±690 (~1e±300): finite, and so is 1 / ratio
_CELLS = 1 << 22  # at most this many step times in one matrix (32 MiB of float64)


def summarise(rows: Sequence[Sequence[float] | np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per process (its positive step times, in order; none empty): its median, and the
    variance of the median's log from the steps alone (0 with fewer than 4 steps). Rows of
    one length are done together, in chunks of bounded size."""
    import numpy as np

    m, v = np.zeros(len(rows)), np.zeros(len(rows))
    by_n: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_n.setdefault(len(r), []).append(i)
    for n, idx in by_n.items():
        step = max(1, _CELLS // n)
        for start in range(0, len(idx), step):
            part = idx[start : start + step]
            m[part], v[part] = _within(np.array([rows[i] for i in part], dtype=float))
    return m, v


def _within(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Medians, and the variance of their logs, for a matrix of step times (one process a
    row): the median's asymptotic variance π/2·σ²/n (σ from the IQR, robust to stray steps) with
    n the AR(1) effective sample size n·(1-ρ)/(1+ρ), ρ the lag-1 autocorrelation (clipped
    to [0, 0.95]: negative ρ is not taken as extra precision)."""
    import numpy as np

    n = x.shape[1]
    srt = np.sort(x, axis=1)
    median = (srt[:, (n - 1) // 2] + srt[:, n // 2]) / 2
    if n < 4:
        return median, np.zeros(len(x))
    x, srt = np.log(x), np.log(srt)
    q1, q3 = np.quantile(srt, [0.25, 0.75], axis=1)
    sigma = (q3 - q1) / 1.349
    c = x - x.mean(axis=1, keepdims=True)
    den = (c * c).sum(axis=1)
    num = (c[:, 1:] * c[:, :-1]).sum(axis=1)
    rho = np.clip(np.divide(num, den, out=np.zeros_like(num), where=den > 0), 0.0, 0.95)
    n_eff = n * (1 - rho) / (1 + rho)
    return median, math.pi / 2 * sigma**2 / n_eff


def _intervals(
    mb: np.ndarray, vb: np.ndarray, mo: np.ndarray, vo: np.ndarray, level: float = LEVEL
) -> tuple[list[float], list[float], list[float], bool]:
    """Ratios and 95 % intervals of pairs with ``kb`` / ``ko`` processes a side (the
    columns of the matrices of medians and variances): Welch's t over processes when both
    sides have :data:`MIN_PROCESSES`, else a normal interval from the within-process
    variance alone. The ratio is exactly base / other with one process a side."""
    import numpy as np

    kb, ko = mb.shape[1], mo.shape[1]
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        exact = mb[:, 0] / mo[:, 0]  # one process a side: the ratio is exactly base / other
    mb, mo = np.log(mb), np.log(mo)
    # in logs, bounded: step times at the schema's ends (5e-324 against 1e308) would make
    # a ratio that underflows to 0 or overflows, and every reader divides by it
    diff = np.clip(mb.mean(axis=1) - mo.mean(axis=1), -_LOG_BOUND, _LOG_BOUND)
    bounded = (exact > math.exp(-_LOG_BOUND)) & (exact < math.exp(_LOG_BOUND))
    value = np.where(bounded, exact, np.exp(diff)) if kb == ko == 1 else np.exp(diff)
    judged = min(kb, ko) >= MIN_PROCESSES
    if judged:
        # each side's variance per process: the spread of its processes' log medians,
        # floored at what their own steps say
        sb = np.maximum(mb.var(axis=1, ddof=1), vb.mean(axis=1)) / kb
        so = np.maximum(mo.var(axis=1, ddof=1), vo.mean(axis=1)) / ko
        se = np.sqrt(sb + so)
        with np.errstate(divide="ignore", invalid="ignore"):
            df = (sb + so) ** 2 / (sb**2 / (kb - 1) + so**2 / (ko - 1))
        df = np.where(np.isfinite(df), df, kb + ko - 2)
        from scipy.special import stdtrit  # Student's t quantile (imported when needed)

        q = stdtrit(df, (1 + level) / 2)
    else:
        se = np.sqrt(vb.mean(axis=1) / kb + vo.mean(axis=1) / ko)
        q = np.full(len(se), statistics.NormalDist().inv_cdf((1 + level) / 2))
    low = np.exp(np.clip(diff - q * se, -_LOG_BOUND, _LOG_BOUND))
    high = np.exp(np.clip(diff + q * se, -_LOG_BOUND, _LOG_BOUND))
    return value.tolist(), low.tolist(), high.tolist(), judged


# The paired design (mxbench.bench.process.windows): a process measured every arm in interleaved
# windows, and its speedup is the median of its rounds' ratios (base window / arm window).
MIN_CLEAN = 3  # undisturbed rounds a process needs before its disturbed ones are left out
# A paired process's median varies more than its rounds say, even with no effect of the
# process itself: the ratio drifts inside a process (an AR(1) across rounds, fitted to
# benchmarks/records/cpu-step18-drift and the rounds of cpu-step18-series by
# benchmarks/paired_interval_calibration.py: benchmarks/records/paired-interval-calibration/)
# and makes the median's variance about this many times the rounds' estimate
# (:func:`summarise`). The processes' spread is floored at it.
DRIFT = 1.8


def paired_process(ratios: Sequence[float], clean: Sequence[bool] = ()) -> Process | None:
    """A paired process's speedup summary: the median of its rounds' ratios and that
    median's log variance (:func:`summarise`: robust spread, lag-1 autocorrelation). Leans
    on undisturbed rounds: when at least :data:`MIN_CLEAN` and half of them were clean, the
    disturbed ones are left out. None: no positive ratio."""
    chosen = [r for r in ratios if r > 0]
    if len(clean) == len(ratios):
        kept = [r for r, ok in zip(ratios, clean, strict=True) if ok and r > 0]
        if len(kept) >= max(MIN_CLEAN, len(chosen) / 2):
            chosen = kept
    if not chosen:
        return None
    med, var = summarise([chosen])
    return float(med[0]), float(var[0])


def paired_intervals(
    logs: np.ndarray, within: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The paired interval of many comparisons at once, in logs: ``logs`` and ``within``
    are (comparisons, k) matrices of the processes' log ratios and their variances from the
    rounds (k >= :data:`MIN_PROCESSES`); the mean, low and high.

    Student's t over the processes with k - 1 degrees of freedom, always: the processes are
    the level where the variance is (each has its own effect on the ratio, and its rounds
    understate even their own drift), so however well two processes happen to agree, k of
    them give k - 1 degrees of freedom and no more. Their spread is floored at
    :data:`DRIFT` times what their rounds say: processes that agree by chance cannot claim
    more precision than one process has. The floor is what keeps ``repeats: auto``'s looks
    (one after every process) from adding false verdicts where the rounds are noisy;
    benchmarks/paired_interval_calibration.py checks both against simulated processes with
    their own effects and drift (docs/measuring.md has its table)."""
    import numpy as np
    from scipy.special import stdtrit  # Student's t quantile (imported when needed)

    k = logs.shape[1]
    mean = np.clip(logs.mean(axis=1), -_LOG_BOUND, _LOG_BOUND)
    spread = np.maximum(logs.var(axis=1, ddof=1), DRIFT * within.mean(axis=1))
    half = float(stdtrit(k - 1, (1 + level) / 2)) * np.sqrt(spread / k)
    return mean, mean - half, mean + half


def judge_paired(groups: Sequence[Sequence[Process]], level: float = LEVEL) -> list[Ratio | None]:
    """Speedups from paired processes (each :func:`paired_process`): the geometric mean of
    the processes' ratios, with :func:`paired_intervals`' interval over processes; with one
    process, an interval over its rounds and no verdict. None where a group has no process.
    Groups with the same number of processes are judged together."""
    out: list[Ratio | None] = [None] * len(groups)
    by_k: dict[int, list[int]] = {}
    for i, procs in enumerate(groups):
        if procs:
            by_k.setdefault(len(procs), []).append(i)
    if not by_k:
        return out
    import numpy as np

    z = statistics.NormalDist().inv_cdf((1 + level) / 2)
    for k, members in by_k.items():
        arr = np.array([groups[i] for i in members], dtype=float)  # (groups, k, 2)
        logs, within = np.log(arr[:, :, 0]), arr[:, :, 1]
        if k >= MIN_PROCESSES:
            mean, low, high = paired_intervals(logs, within, level)
            over: Over = "processes"
        else:
            mean = np.clip(logs[:, 0], -_LOG_BOUND, _LOG_BOUND)
            half = z * np.sqrt(within[:, 0])
            low, high, over = mean - half, mean + half, "steps"
        low, high = np.maximum(low, -_LOG_BOUND), np.minimum(high, _LOG_BOUND)
        for row, i in enumerate(members):
            out[i] = Ratio(math.exp(mean[row]), math.exp(low[row]), math.exp(high[row]), over, k)
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
