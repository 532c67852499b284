"""Two sets of results, cell by cell: how the step time changed, how sure that is, and
whether it is a regression (for CI checks of a driver, CUDA or TensorFlow upgrade).

Cells are matched by host, image and parameters (repeats of a cell pooled). The change is
median(new) / median(base) - 1 with the 95% interval and the verdict of
:mod:`mxbench.stats` (processes are the unit: with one process a side the verdict is
"too few processes" and there is no interval); a cell *regressed* when it is slower by
more than the threshold and its interval excludes no change. Rows come sorted by host,
image and parameters, numbers as numbers (batch 8 before 32).

:func:`speedups` compares the answer itself: per table (host, image, setup) and slot, the
speedup over float32 in each run ("mixed precision gained 0.30x after the driver update"),
with both intervals; the change is *clear* when the two intervals do not overlap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from mxbench import stats
from mxbench.matrix import params
from mxbench.matrix.params import Params
from mxbench.records import summary
from mxbench.records.record import Record
from mxbench.report import tables
from mxbench.report.load import Loaded

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
    # the host's measured noise floor per process (mxbench doctor --noise), when one exists,
    # and whether this change is smaller than it
    floor: float | None = None
    below_floor: bool = False


class Failed(msgspec.Struct):
    """A cell timed on one side whose every attempt on the other side failed (an upgrade
    that makes a cell run out of memory is a regression, not a cell "only in base")."""

    host: str
    image: str | None
    params: dict[str, object]
    timed_ms: float  # its median step time on the side where it ran
    status: str  # oom, error, timeout or unsupported: on the other side
    error: str | None  # the last line of that side's error


class Alone(msgspec.Struct):
    """A cell only one side has at all (timed or failed there): a cell added or dropped."""

    host: str
    image: str | None
    params: dict[str, object]
    status: str  # its latest status on that side


@dataclass
class Comparison:
    changes: list[Change]  # cells timed on both sides
    only_base: list[Alone]  # cells that only one side has at all
    only_new: list[Alone]
    broke: list[Failed]  # timed in base, failed in new
    fixed: list[Failed]  # failed in base, timed in new
    failed_both: list[Alone]  # failed on both sides (status: new's)


@functools.lru_cache(maxsize=4096)
def _identity(p: Params) -> tuple[tuple[str, ...], dict[str, object]]:
    """The parameters that identify a cell (repeats aside): as text for the key, and as
    they are for the output (one object per distinct parameters, however many cells)."""
    return tuple(str(getattr(p, n)) for n in _IDENTITY), {k: getattr(p, k) for k in _IDENTITY}


def _where(rec: Record) -> dict[str, Any]:
    """Its host and image as every list shows them: bounded like the report's
    (:data:`mxbench.report.tables.MAX_RECORD_TEXT`); cells are matched on them whole."""
    image = rec.image.name or rec.image.id
    return {"host": tables.bounded(str(rec.host)), "image": image and tables.bounded(image)}


def _key(rec: Record) -> Key:
    return (str(rec.host), rec.image.name or rec.image.id or "", *_identity(rec.params)[0])


def _order(value: Any) -> tuple[int, Any]:
    """Numbers by value, everything else as text (None first)."""
    if value is None:
        return (0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value)
    return (2, str(value))


def order(c: Change | SpeedupChange | Failed | Alone) -> tuple[Any, ...]:
    return (c.host, c.image or "", *(_order(v) for v in c.params.values()))


def _processes(loaded: Loaded) -> dict[Key, tuple[Record, list[stats.Process]]]:
    out: dict[Key, tuple[Record, list[stats.Process]]] = {}
    for rec in loaded.winners:
        proc = summary.process(rec)
        if proc is not None:
            out.setdefault(_key(rec), (rec, []))[1].append(proc)
    return out


def _failed(loaded: Loaded, timed: dict[Key, Any]) -> dict[Key, Record]:
    """The cells whose every attempt failed (none timed)."""
    return {k: r for r in loaded.winners if r.status != "ok" and (k := _key(r)) not in timed}


def _broken(
    timed: dict[Key, tuple[Record, list[stats.Process]]], failed: dict[Key, Record]
) -> list[Failed]:
    out = [
        Failed(
            **_where(rec),
            params=_identity(rec.params)[1],
            timed_ms=_median(timed[key][1]),
            status=failed[key].status,
            error=tables.last_line(failed[key].error),
        )
        for key in timed.keys() & failed.keys()
        for rec in [timed[key][0]]
    ]
    out.sort(key=order)
    return out


def compare(base: Loaded, new: Loaded, threshold: float) -> Comparison:
    """The changes of cells timed on both sides, the cells that ran on one side and failed on
    the other, and how many cells only one side has."""
    b, n = _processes(base), _processes(new)
    fb, fn = _failed(base, b), _failed(new, n)
    broke, fixed = _broken(b, fn), _broken(n, fb)
    common = sorted(b.keys() & n.keys())
    ratios = stats.judge([(b[k][1], n[k][1]) for k in common])
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
                **_where(rec),
                params=_identity(rec.params)[1],
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
    out.sort(key=order)
    base_keys, new_keys = b.keys() | fb.keys(), n.keys() | fn.keys()
    return Comparison(
        out,
        _alone(base_keys - new_keys, b, fb),
        _alone(new_keys - base_keys, n, fn),
        broke,
        fixed,
        _alone(fb.keys() & fn.keys(), {}, fn),
    )


def floors(changes: list[Change], dirs: list[Path]) -> dict[str, float]:
    """Each host's measured noise floor per process (the first of ``dirs`` that has one:
    ``mxbench doctor --noise``), stamped on its changes; host -> floor."""
    from mxbench.stats import noise

    found: dict[str, float] = {}
    for host in sorted({c.host for c in changes}):
        for d in dirs:
            f = noise.load(d, host)
            if f is not None and f.process is not None:
                found[host] = f.process
                break
    for c in changes:
        if c.host in found:
            c.floor = found[c.host]
            c.below_floor = abs(c.change) < found[c.host]
    return found


def _alone(
    keys: set[Key], timed: dict[Key, tuple[Record, list[stats.Process]]], failed: dict[Key, Record]
) -> list[Alone]:
    """The cells of ``keys`` (one side's only, or failed on both), sorted like the others."""
    out = []
    for key in keys:
        rec = timed[key][0] if key in timed else failed[key]
        out.append(Alone(**_where(rec), params=_identity(rec.params)[1], status=rec.status))
    out.sort(key=order)
    return out


class SpeedupChange(msgspec.Struct):
    """One slot's speedup over float32 in both runs."""

    host: str
    image: str | None
    params: dict[str, object]  # the table's setup, then policy and batch_size
    base: float
    base_low: float
    base_high: float
    new: float
    new_low: float
    new_high: float
    base_verdict: str | None  # None: no interval (one number per side)
    new_verdict: str | None
    clear: bool  # both have intervals and they do not overlap

    @property
    def gained(self) -> float:
        return self.new - self.base


def _tables(loaded: Loaded) -> dict[tuple[str, ...], tables.Table]:
    return {
        (t.host, t.image_name or "", *(str(v) for v in t.setup.values())): t
        for t in tables.build(loaded.winners)
    }


def speedups(base: Loaded, new: Loaded) -> list[SpeedupChange]:
    """The speedup of every slot that has one in both runs, sorted like the cells."""
    b, n = _tables(base), _tables(new)
    out = []
    for key in b.keys() & n.keys():
        old_t, new_t = b[key], n[key]
        for slot in old_t.ratios.keys() & new_t.ratios.keys():
            if not (old_t.trusted(slot) and new_t.trusted(slot)):
                continue
            r0, r1 = old_t.ratios[slot], new_t.ratios[slot]
            both = r0.n >= 2 and r1.n >= 2
            out.append(
                SpeedupChange(
                    host=new_t.host,
                    image=new_t.image_name,
                    params={**new_t.setup, "policy": slot[0], "batch_size": slot[1]},
                    base=r0.value,
                    base_low=r0.low,
                    base_high=r0.high,
                    new=r1.value,
                    new_low=r1.low,
                    new_high=r1.high,
                    base_verdict=r0.verdict if r0.n >= 2 else None,
                    new_verdict=r1.verdict if r1.n >= 2 else None,
                    clear=both and (r1.low > r0.high or r1.high < r0.low),
                )
            )
    out.sort(key=order)
    return out


def _median(processes: list[stats.Process]) -> float:
    """The median of the processes' medians."""
    import statistics

    return float(statistics.median([m for m, _ in processes]))
