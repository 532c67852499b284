"""The map's no-communication reference and per-device health sweep, from cells of
independent replicas (``scaling: independent``, :mod:`mxbench.bench.parallel.independent`).

**The reference.** At each N, data parallel's throughput over the independent replicas' at
the same N and per-device batch (both carry N x batch_size a step): the share of the
no-communication throughput data parallel keeps. ``1 - kept`` is what the gradient
all-reduce and the synchronisation cost; the efficiency ``T_N / (N * T_1)`` mixes that with
what N devices cost each other without talking (a shared host, its memory, its input
pipeline), which the independent replicas pay too. It is the ratio of the two images/s the
map prints, with an interval over the processes' log images/s
(:mod:`mxbench.report.sections.throughput`). Data parallel does the replicas' work and more: a share
above :data:`KEPT_ABOVE` is flagged as a finding (the reference was slowed, or the two cells
did not measure the same thing), never shown as a win.

**The health sweep.** Each replica's throughput against the others' in the same cell(s),
paired step by step: the replicas run side by side, so the median of the others' k-th steps
over its own k-th step cancels what disturbs them all (the paired design's rounds,
:func:`mxbench.stats.paired_process`: the median ratio, its variance from the steps'
robust spread and autocorrelation); over several records, Student's t over them
(:func:`mxbench.stats.judge_paired`), one record: the interval over its steps. A replica is
*slow* when that whole 95 % interval lies under :data:`SLOW` (90 % of the others'
throughput): clearly slower, and by more than the few percent two healthy cards of one
model differ by (clocks, temperature). With two devices the slower of the two is named;
which one is at fault takes a third.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mxbench import stats
from mxbench.records.record import Record
from mxbench.report.sections import throughput
from mxbench.report.tables import Entry

SLOW = 0.90  # a replica is slow when its throughput's interval lies wholly below this
# data parallel keeping more than this share of independent replicas' throughput: flagged
KEPT_ABOVE = 1.05
HEADERS = ["independent images/s", "kept of independent [95% CI]"]
CSV_FLOATS = ("independent_images_per_s", "kept_of_independent", "kept_of_independent_low",
              "kept_of_independent_high")  # fmt: skip
CSV_FLAGS = ("kept_flagged",)
CSV_TEXTS = ("slow_devices",)
NOTE = (
    "kept of independent = data parallel's images/s over independent replicas' at the same "
    "N (one replica per device, no gradient all-reduce): 1 - kept is what the all-reduce and "
    "the synchronisation cost; the rest of the efficiency's shortfall the devices cost each "
    "other without talking"
)


@dataclass
class Reference:
    """The independent replicas at a data-parallel point's N, policy and batch."""

    images_per_s: float | None
    kept: stats.Ratio | None  # data parallel's throughput / the replicas' (None: unjudged)

    @property
    def flagged(self) -> bool:
        """Data parallel kept more than :data:`KEPT_ABOVE` of the replicas' throughput."""
        return self.kept is not None and self.kept.value > KEPT_ABOVE


FLAGGED = "above {limit:.0%} (flagged)"  # the kept cell's mark


def flagged_note(policy: str, batch: int, devices: int, ref: Reference) -> str:
    """The finding of a flagged reference."""
    assert ref.kept is not None
    return (
        f"kept of independent above {KEPT_ABOVE:.0%}: {policy} at batch {batch} on {devices} "
        f"devices keeps {_percent(ref.kept)} of independent replicas' throughput: data "
        "parallel does the replicas' work and an all-reduce more, so something is off, not a "
        "win: suspect the reference (its replicas slowed by each other, a noisy process, "
        "shared cores) or a difference between the two cells (jit_compile, input pipeline)"
    )


def _percent(r: stats.Ratio) -> str:
    if not r.judged:
        return f"{r.value:.0%}"
    return f"{r.value:.0%} [{r.low:.0%}–{r.high:.0%}]"


def cells(ref: Reference | None) -> list[str]:
    """A point's reference columns (:data:`HEADERS`) as text."""
    if ref is None:
        return ["", ""]
    rate = stats.figure(ref.images_per_s, 1) if ref.images_per_s is not None else ""
    kept = _percent(ref.kept) if ref.kept is not None else ""
    if ref.flagged:
        kept += " " + FLAGGED.format(limit=KEPT_ABOVE)
    return [rate, kept]


def references(
    wanted: Sequence[tuple[Sequence[Record], float | None, Entry | None, int]],
) -> list[Reference | None]:
    """Per (data parallel's records, its printed images/s, the replicas' entry at its N or
    None, the global batch): the reference, judged together: kept is the printed images/s
    over the replicas' printed images/s (:mod:`mxbench.report.sections.throughput`)."""
    found = [ind.images_per_s(glob) if ind is not None else None for _, _, ind, glob in wanted]
    kept = throughput.ratios([
        (throughput.rates(dp, glob), throughput.rates(ind.records, glob), rate / other)
        if ind is not None and rate and other else ([], [], None)
        for (dp, rate, ind, glob), other in zip(wanted, found, strict=True)
    ])  # fmt: skip
    return [
        Reference(other, ratio) if ind is not None else None
        for (_, _, ind, _), other, ratio in zip(wanted, found, kept, strict=True)
    ]


@dataclass
class Health:
    """The health sweep of one cell of independent replicas (its records together)."""

    policy: str
    batch_size: int
    devices: list[str]  # the replicas' devices, in order
    images_per_s: list[float | None]  # each replica's, the median over the records
    ratios: list[stats.Ratio | None]  # each replica's throughput over the others'
    records: int
    shared: bool = False  # slices of one CPU: the sweep checks plumbing, not hardware

    @property
    def slow(self) -> list[int]:
        """The replicas clearly below the others (:data:`SLOW`)."""
        return [i for i, r in enumerate(self.ratios) if r is not None and r.high < SLOW]

    def sentence(self) -> str:
        said = self._said()
        if self.shared:
            said += " (the replicas share this host's cores: plumbing, not a check of hardware)"
        return said

    def _said(self) -> str:
        n = len(self.devices)
        where = f"{self.policy} at batch {self.batch_size}, {n} replicas"
        runs = f", {self.records} runs" if self.records > 1 else ""
        rates = ", ".join(
            f"{d} {stats.figure(x, 1)}" if x is not None else f"{d} –"
            for d, x in zip(self.devices, self.images_per_s, strict=True)
        )
        if self.slow:
            said = "; ".join(
                f"{self.devices[i]} is slow: {_ratio(self.ratios[i])} of the others' throughput"
                for i in self.slow
            )
            return f"health sweep ({where}{runs}): {said} (images/s: {rates})"
        judged = [(r.value, i) for i, r in enumerate(self.ratios) if r is not None]
        low = min(judged)[1] if judged else None
        worst = (
            f"; the slowest, {self.devices[low]}, at {_ratio(self.ratios[low])} of the others'"
            if low is not None
            else ""
        )
        return (
            f"health sweep ({where}{runs}): no device clearly slow (none with its whole 95% "
            f"interval under {SLOW:.0%} of the others' throughput){worst} (images/s: {rates})"
        )


def _ratio(r: stats.Ratio | None) -> str:
    if r is None:
        return "–"
    return f"{r.value:.0%} [{r.low:.0%}–{r.high:.0%}]"


def sweep(policy: str, batch_size: int, records: Sequence[Record]) -> Health | None:
    """The health sweep of a cell's ok records of independent replicas (None: none carries
    its replicas' steps, or they disagree on the devices)."""
    timed = [r.distribution.replica_timings for r in records
             if r.status == "ok" and r.distribution is not None
             and r.distribution.replica_timings]  # fmt: skip
    if not timed or len({tuple(x.device for x in t) for t in timed}) > 1:
        return None
    n = len(timed[0])
    if n < 2:
        return None
    import numpy as np  # here, as in mxbench.stats: most reports sweep no replicas

    groups: list[list[stats.Process]] = [[] for _ in range(n)]
    for t in timed:  # each record: every replica's k-th step against the others' k-th
        steps = [list(x.step_ms) for x in t]
        if len({len(x) for x in steps}) != 1 or not steps[0] or min(map(min, steps)) <= 0:
            continue
        arr = np.array(steps, dtype=float)
        for i in range(n):
            found = stats.paired_process(list(np.median(np.delete(arr, i, 0), 0) / arr[i]))
            if found is not None:
                groups[i].append(found)
    rates = [_median([x for t in timed if (x := t[i].images_per_s) is not None]) for i in range(n)]
    shared = any(r.distribution is not None and r.distribution.shared_cores for r in records)
    return Health(policy, batch_size, [x.device for x in timed[0]], rates,
                  stats.judge_paired(groups), len(timed), shared)  # fmt: skip


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def as_dict(h: Health) -> dict[str, Any]:
    """A health sweep for the JSON report."""
    return {
        "policy": h.policy,
        "batch_size": h.batch_size,
        "records": h.records,
        "shared_cores": h.shared,
        "rule": f"slow: the replica's throughput over the others' has its whole 95% "
        f"interval below {SLOW}",
        "replicas": [
            {
                "device": d,
                "images_per_s": x,
                "vs_others": None
                if r is None
                else {
                    "value": round(r.value, 4),
                    "low": round(r.low, 4),
                    "high": round(r.high, 4),
                    "over": r.over,
                },
                "slow": i in h.slow,
            }
            for i, (d, x, r) in enumerate(zip(h.devices, h.images_per_s, h.ratios, strict=True))
        ],
        "slow": [h.devices[i] for i in h.slow],
    }


def reference_columns(ref: Reference | None) -> dict[str, Any]:
    """A data-parallel record's CSV columns of the reference."""
    kept = ref.kept if ref is not None else None
    judged = kept is not None and kept.judged
    return {
        "independent_images_per_s": ref.images_per_s if ref is not None else None,
        "kept_of_independent": round(kept.value, 4) if kept is not None else None,
        "kept_of_independent_low": round(kept.low, 4) if judged and kept else None,
        "kept_of_independent_high": round(kept.high, 4) if judged and kept else None,
        "kept_flagged": ref.flagged if ref is not None else None,
    }


def health_columns(h: Health) -> dict[str, Any]:
    """An independent record's CSV column: its cell's slow devices ("" where none)."""
    return {"slow_devices": " ".join(h.devices[i] for i in h.slow)}
