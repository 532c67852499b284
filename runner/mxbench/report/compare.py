"""Two sets of results, cell by cell: how the step time changed, how sure that is, and
whether it is a regression (for CI checks of a driver, CUDA or TensorFlow upgrade).

Cells are matched by host, image and parameters (repeats of a cell pooled). The change is
median(new) / median(base) - 1 with the 95% interval and the verdict of
:mod:`mxbench.stats` (processes are the unit: with one process a side the verdict is
"too few processes" and there is no interval); a cell *regressed* when it is slower by
more than the threshold and its interval excludes no change.
"""

from __future__ import annotations

import msgspec

from mxbench import params, stats
from mxbench.report.load import Loaded
from mxbench.results import Record

Key = tuple[str, ...]
_IDENTITY = [n for n in params.names() if params.field(n).spec.role != "repeat"]


class Change(msgspec.Struct):
    host: str
    image: str | None
    params: dict[str, object]
    base_ms: float
    new_ms: float
    change: float  # new / base - 1 (positive: slower)
    low: float | None  # the interval's ends (None: too few processes for one)
    high: float | None
    over: str
    verdict: stats.Verdict  # of the new run against the base
    regressed: bool


def _key(rec: Record) -> Key:
    p = rec.params
    return (str(rec.host), rec.image.name or rec.image.id or "",
            *(str(getattr(p, n)) for n in _IDENTITY))  # fmt: skip


def _samples(loaded: Loaded) -> dict[Key, tuple[Record, list[list[float]]]]:
    out: dict[Key, tuple[Record, list[list[float]]]] = {}
    for rec in loaded.winners:
        step = rec.step
        if step is None or step.median is None:
            continue
        entry = out.setdefault(_key(rec), (rec, []))
        entry[1].append(list(step.samples) or [step.median])
    return out


def compare(base: Loaded, new: Loaded, threshold: float) -> tuple[list[Change], int, int]:
    """The changes of cells timed on both sides, and how many cells only one side timed."""
    b, n = _samples(base), _samples(new)
    common = sorted(b.keys() & n.keys())
    ratios = stats.speedups([(b[k][1], n[k][1]) for k in common])
    out = []
    for key, ratio in zip(common, ratios, strict=True):
        if ratio is None:
            continue
        rec = n[key][0]
        change = 1 / ratio.value - 1
        low, high = (1 / ratio.high - 1, 1 / ratio.low - 1) if ratio.judged else (None, None)
        # ratio = median(base) / median(new): its verdict is already about the new run
        verdict = ratio.verdict
        out.append(
            Change(
                host=str(rec.host),
                image=rec.image.name or rec.image.id,
                params={k: getattr(rec.params, k) for k in _IDENTITY},
                base_ms=_median(b[key][1]),
                new_ms=_median(n[key][1]),
                change=change,
                low=low,
                high=high,
                over=ratio.over,
                verdict=verdict,
                regressed=verdict == stats.SLOWER and change > threshold,
            )
        )
    return out, len(b.keys() - n.keys()), len(n.keys() - b.keys())


def _median(runs: list[list[float]]) -> float:
    import statistics

    return float(statistics.median([statistics.median(r) for r in runs]))
