"""The speedup x scale map: per model x policy x device count, the total and per-device
throughput, the scaling efficiency ``T_N / (N * T_1)`` with its interval, and the
mixed/float32 speedup at each N with its interval.

Tables that differ only in ``devices`` (:mod:`mxbench.report.tables`: ``devices`` is a setup
parameter, so each count is its own table with its own speedups) are one map. The efficiency
of a slot (policy, batch size) at N devices is the throughput the map prints for it over N
times the one it prints for the same slot on one device (images/s over the timed window, the
median over processes): a reader gets the same figure from the table's own columns. Its
interval is Welch's t over the processes' log images/s around that ratio
(:mod:`mxbench.report.sections.throughput`). Above :data:`SUPERLINEAR` it is flagged, never shown as a
win; devices cut from one CPU share its cores, and the map says so.

Why the efficiency falls short is said per policy where the devices have hardware of their
own (:func:`scaling_bound`): the gradient all-reduce only where independent replicas
(``scaling: independent``) measured at that N show it, else "communication or contention".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mxbench import stats
from mxbench.matrix import scale
from mxbench.matrix.params import BASELINE, POLICIES
from mxbench.records.record import Record
from mxbench.report.sections import scaling_reference as reference
from mxbench.report.sections import throughput
from mxbench.report.tables import Entry, Table, bounded

TITLE = "Scaling"  # each map's heading: "Scaling: <title>"
SUPERLINEAR = 1.05  # efficiency above this is flagged: a measurement to doubt, not a win
SHARED = (
    "the {n} devices share this host's cores: efficiency here measures nothing about "
    "interconnects (plumbing, not scaling)"
)
SUPER_NOTE = (
    "super-linear: efficiency above 105% is flagged, not a win (suspect the one-device "
    "reference: a noisy process, a batch that fits caches differently, shared cores)"
)
HEADERS = [
    "policy",
    "batch",
    "devices",
    "global batch",
    "per device",
    "images/s",
    "images/s per device",
    "efficiency [95% CI]",
    "speedup vs float32 [95% CI]",
]
# The CSV's columns of the map, per record (mxbench.report.frame), and their types.
CSV_INTEGERS = ("global_batch", "per_device_batch")
CSV_FLOATS = ("scaling_efficiency", "scaling_efficiency_low", "scaling_efficiency_high",
              *reference.CSV_FLOATS)  # fmt: skip
CSV_FLAGS = ("superlinear", "shared_cores", *reference.CSV_FLAGS)
CSV_TEXTS = reference.CSV_TEXTS
CSV_COLUMNS = (*CSV_INTEGERS, *CSV_FLOATS, *CSV_FLAGS, *CSV_TEXTS)


@dataclass
class Point:
    """One policy at one batch size on N devices."""

    policy: str
    batch_size: int
    devices: int
    global_batch: int
    per_device_batch: int
    images_per_s: float | None
    efficiency: stats.Ratio | None  # None: no one-device reference (or N = 1 itself)
    speedup: stats.Ratio | None  # over float32 at this N (the table's)
    shared_cores: bool
    records: list[Record] = field(default_factory=list, repr=False)
    # independent replicas at this N (scaling: independent; report/sections/scaling_reference.py)
    reference: reference.Reference | None = None

    @property
    def per_device_images_per_s(self) -> float | None:
        return self.images_per_s / self.devices if self.images_per_s is not None else None

    @property
    def superlinear(self) -> bool:
        return self.efficiency is not None and self.efficiency.value > SUPERLINEAR


@dataclass
class Map:
    title: str
    scaling: str
    points: list[Point]
    notes: list[str]
    headers: list[str] = field(default_factory=lambda: list(HEADERS))
    # the health sweeps of its cells of independent replicas, and their records
    health: list[tuple[reference.Health, list[Record]]] = field(default_factory=list)

    @property
    def referenced(self) -> bool:
        """Whether independent replicas stand beside data parallel (the reference columns)."""
        return any(p.reference is not None for p in self.points)

    @property
    def rows(self) -> list[list[str]]:
        extra = reference.cells if self.referenced else lambda _: []
        return [row(p) + extra(p.reference) for p in self.points]


def _percent(r: stats.Ratio) -> str:
    if not r.judged:
        return f"{r.value:.0%}"
    return f"{r.value:.0%} [{r.low:.0%}–{r.high:.0%}]"


def row(p: Point) -> list[str]:
    """A point as the map's row of text."""
    rate = p.images_per_s
    if p.devices == 1:
        eff = "reference"
    elif p.efficiency is None:
        eff = "no 1-device reference"
    else:
        eff = _percent(p.efficiency) + (" super-linear (flagged)" if p.superlinear else "")
    return [
        p.policy,
        str(p.batch_size),
        str(p.devices),
        str(p.global_batch),
        str(p.per_device_batch),
        stats.figure(rate, 1) if rate is not None else "",
        stats.figure(rate / p.devices, 1) if rate is not None else "",
        eff,
        p.speedup.text() if p.speedup is not None else "",
    ]


def _scaling(t: Table) -> str:
    return str(t.setup.get("scaling") or "weak")


def _key(t: Table) -> tuple[object, ...]:
    """What a map's tables share: everything but N (and independent replicas join weak
    scaling's map, whose batches they have)."""
    setup = {**t.setup, "scaling": "weak" if _scaling(t) == scale.INDEPENDENT else _scaling(t)}
    rest = tuple(sorted((k, repr(v)) for k, v in setup.items() if k not in _COUNTS))
    return (t.host, t.device.kind, t.device.name, t.image.name, t.image.id, rest)


_COUNTS = ("devices", "nodes")  # N of the map: devices per process x processes


def _devices(t: Table) -> int:
    return int(t.setup.get("devices") or 1) * int(t.setup.get("nodes") or 1)


def build(tables: Sequence[Table]) -> list[Map]:
    """One map per group of tables that differ only in the device count, where some table
    has more than one device."""
    if not any(_devices(t) > 1 for t in tables):
        return []  # the common case: one device everywhere, no map (and no key to make)
    groups: dict[tuple[object, ...], list[Table]] = {}
    for t in tables:
        groups.setdefault(_key(t), []).append(t)
    return [_map(g) for g in groups.values() if any(_devices(t) > 1 for t in g)]


def _title(t: Table) -> str:
    parts = [x for x in t.title.split(" · ") if not x.startswith(("devices ", "scaling ",
                                                                     "nodes "))]  # fmt: skip
    model = Path(str(t.setup.get("model") or "")).name
    if model and model not in parts:
        parts.insert(2, bounded(model))
    return " · ".join([*parts, f"{t.setup.get('scaling') or 'weak'} scaling"])


def _map(tables: list[Table]) -> Map:
    """The map of one group: data parallel's tables (else the independent replicas' alone,
    a health sweep), with the replicas beside them."""
    independent = sorted((t for t in tables if _scaling(t) == scale.INDEPENDENT), key=_devices)
    parallel = [t for t in tables if t not in independent]
    m = _points_map(sorted(parallel or independent, key=_devices))
    if parallel:
        _reference(m, independent)
    m.notes = notes(m.points)
    for t in independent:
        for (policy, batch), e in t.entries.items():
            found = reference.sweep(policy, batch, e.records) if _ok(e) else None
            if found is not None:
                m.health.append((found, list(e.records)))
    m.notes += [h.sentence() for h, _ in m.health]
    return m


def _reference(m: Map, independent: list[Table]) -> None:
    """Each point's independent replicas at its N, and the reference columns and note."""
    at = {_devices(t): t for t in independent}
    wanted = [(p, at[p.devices].entries.get((p.policy, p.batch_size)) if p.devices in at
               else None) for p in m.points]  # fmt: skip
    found = reference.references(
        [(p.records, p.images_per_s, e if _ok(e) else None, p.global_batch) for p, e in wanted]
    )
    for p, ref in zip(m.points, found, strict=True):
        p.reference = ref if p.devices > 1 else None
    if m.referenced:
        m.headers += reference.HEADERS


def _points_map(group: list[Table]) -> Map:
    slots = sorted(
        {s for t in group for s, e in t.entries.items() if e.status == "ok"},
        key=lambda s: (POLICIES.index(s[0]) if s[0] in POLICIES else len(POLICIES), s),
    )
    points = [_point(t, slot) for slot in slots for t in group if _ok(t.entries.get(slot))]
    one = {(p.policy, p.batch_size): p for p in points if p.devices == 1}
    wanted: list[tuple[list[stats.Process], list[stats.Process], float | None]] = []
    for p in points:
        base = one.get((p.policy, p.batch_size)) if p.devices > 1 else None
        if base is None or not base.images_per_s or not p.images_per_s:
            wanted.append(([], [], None))
            continue
        wanted.append((
            throughput.rates(p.records, p.global_batch),
            throughput.rates(base.records, base.global_batch),
            p.images_per_s / (p.devices * base.images_per_s),  # the printed figures' ratio
        ))  # fmt: skip
    for p, ratio in zip(points, throughput.ratios(wanted), strict=True):
        p.efficiency = ratio
    return Map(_title(group[0]), str(group[0].setup.get("scaling") or "weak"), points, [])


def _ok(e: Entry | None) -> bool:
    return e is not None and e.status == "ok"


def _point(t: Table, slot: tuple[str, int]) -> Point:
    """A slot of a table as a point (its efficiency: :func:`_points_map`)."""
    policy, batch = slot
    e = t.entries[slot]
    n = _devices(t)
    glob, per_device = scale.batches(batch, n, str(t.setup.get("scaling") or "weak"))
    shared = any(r.distribution is not None and r.distribution.shared_cores for r in e.records)
    return Point(
        policy=policy,
        batch_size=batch,
        devices=n,
        global_batch=glob,
        per_device_batch=per_device,
        images_per_s=e.images_per_s(glob),
        efficiency=None,
        speedup=t.ratios.get(slot) if policy != BASELINE else None,
        shared_cores=shared,
        records=list(e.records),
    )


# Efficiency clearly below this (its whole interval), on devices of their own, is said and
# explained: by the all-reduce where the share of independent replicas' throughput data
# parallel keeps is clearly below it too, by contention where that share is clearly above.
COMMUNICATION = 0.70


def scaling_bound(points: Sequence[Point]) -> list[str]:
    """The diagnosis of devices of their own (never of slices of one CPU, whose efficiency
    says nothing about interconnects): per policy, the largest N whose efficiency is clearly
    below :data:`COMMUNICATION` (its whole interval under it), with what mixed precision's
    speedup became there against one device, and why, as far as the records tell:

    - ``communication-bound``: independent replicas at that N were measured, and data
      parallel keeps clearly less than :data:`COMMUNICATION` of their throughput: the
      all-reduce alone costs more than the rest;
    - ``contention-bound``: it keeps clearly more (and not above
      :data:`~mxbench.report.sections.scaling_reference.KEPT_ABOVE`, a reference to doubt): the
      replicas, which do not talk, lose most of it too;
    - ``communication or contention``: no reference at that N, one without an interval, a
      flagged one, or one whose interval straddles :data:`COMMUNICATION`."""
    out = []
    for policy in dict.fromkeys(p.policy for p in points):
        low = [p for p in points if p.policy == policy and not p.shared_cores
               and p.efficiency is not None and p.efficiency.judged
               and p.efficiency.high < COMMUNICATION]  # fmt: skip
        if not low:
            continue
        worst = max(low, key=lambda p: p.devices)
        out.append(_bound(worst, points))
    return out


def _bound(worst: Point, points: Sequence[Point]) -> str:
    """The sentence of :func:`scaling_bound` for its point."""
    assert worst.efficiency is not None
    one = next((p for p in points if p.policy == worst.policy and p.devices == 1
                and p.batch_size == worst.batch_size), None)  # fmt: skip
    erosion = (
        f"; its speedup over float32 goes from {one.speedup.text()} on one device to "
        f"{worst.speedup.text()} on {worst.devices}"
        if one is not None and one.speedup is not None and worst.speedup is not None
        else ""
    )
    n = worst.devices
    said = (
        f"{worst.policy} at batch {worst.batch_size} keeps {_percent(worst.efficiency)} of "
        f"linear scaling on {n} devices (below {COMMUNICATION:.0%}){erosion}"
    )
    ref = worst.reference
    kept = ref.kept if ref is not None else None
    if ref is not None and kept is not None and kept.judged and not ref.flagged:
        share = f"data parallel keeps {_percent(kept)} of independent replicas' throughput"
        if kept.high < COMMUNICATION:
            return (
                f"communication-bound: {said}; {share} at N = {n}: the gradient all-reduce "
                "and the synchronisation, not the arithmetic, set the step there; larger "
                "per-device batches or a 16-bit all-reduce (where the backend allows it) "
                "shrink it, a faster precision does not"
            )
        if kept.low > COMMUNICATION:
            alone = worst.efficiency.value / kept.value  # the replicas' own T_N / (N * T_1)
            return (
                f"contention-bound: {said}, and not for its all-reduce: {share} at N = {n}, "
                f"and the replicas, which do not talk, reach {alone:.0%} of linear scaling "
                "themselves: the devices cost each other (the host they share, its memory, "
                "its input pipeline); a faster interconnect or a 16-bit all-reduce would "
                "not recover it"
            )
    if ref is None or kept is None:
        why = f"no independent replicas measured at N = {n}"
    elif ref.flagged:
        above = f"{reference.KEPT_ABOVE:.0%}"
        why = f"the independent reference is flagged (kept {_percent(kept)}, above {above})"
    elif not kept.judged:
        why = f"kept of independent {_percent(kept)} has one process a side: no interval"
    else:
        side = f"not clearly on either side of {COMMUNICATION:.0%}"
        why = f"kept of independent {_percent(kept)} is {side}"
    return (
        f"communication or contention: {said}: the gradient all-reduce, or what the devices "
        f"cost each other without talking (a shared host, its memory, its input pipeline); "
        f"{why}, and independent replicas (scaling: independent) judged at N = {n} tell the "
        "two apart"
    )


EFFICIENCY_NOTE = (
    "efficiency = T_N / (N · T_1): the images/s printed on N devices over N times one "
    "device's (each the median over processes of the images/s over their timed windows; the "
    "table's own columns give it); its interval: Welch's t over processes of their log "
    "images/s around that ratio, a median's larger spread counted (a bare figure: one "
    "process a side, no interval)"
)


def notes(points: Sequence[Point]) -> list[str]:
    """What the map's numbers are, and what they cannot say."""
    out = [EFFICIENCY_NOTE]
    shared = sorted({p.devices for p in points if p.shared_cores})
    if shared:
        out.append(SHARED.format(n=" / ".join(map(str, shared))))
    if any(p.superlinear for p in points):
        out.append(SUPER_NOTE)
    if any(p.reference is not None for p in points):
        out.append(reference.NOTE)
        out += [reference.flagged_note(p.policy, p.batch_size, p.devices, p.reference)
                for p in points if p.reference is not None and p.reference.flagged]  # fmt: skip
    out += scaling_bound(points)
    out += interconnects(points)
    jit = {p.devices: r.settings.jit_compile for p in points for r in p.records}
    if len(set(jit.values()) - {None}) > 1:
        on = sorted(n for n, j in jit.items() if j)
        out.append(
            f"jit_compile differs between device counts (on at N = {', '.join(map(str, on))}, "
            "off elsewhere: TensorFlow's MirroredStrategy on CPU runs without XLA): the "
            "efficiency mixes the two"
        )
    return out


def interconnects(points: Sequence[Point]) -> list[str]:
    """What the records say about the devices' links (bench/parallel/interconnect.py), each distinct
    account once: the links by kind and the slowest, NCCL's version, or what could not be
    read and why."""
    found: dict[str, set[int]] = {}
    for p in points:
        for r in p.records:
            ic = r.distribution.interconnect if r.distribution is not None else None
            if ic is None:
                continue
            said = []
            if ic.links:
                kinds = Counter(ic.links.values())
                pairs = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
                said.append(f"links between the GPUs used ({ic.topology}): {pairs}, the "
                            f"slowest {ic.slowest}")  # fmt: skip
            if ic.nccl:
                said.append(f"NCCL {ic.nccl} ({ic.nccl_from})")
            if ic.unreadable:
                said.append("not readable here: " + "; ".join(ic.unreadable))
            found.setdefault("; ".join(said), set()).add(p.devices)
    return [f"interconnect at N = {', '.join(map(str, sorted(ns)))}: {text}"
            for text, ns in found.items()]  # fmt: skip


def as_dict(m: Map) -> dict[str, Any]:
    """A map for the JSON report: its rows as numbers."""

    def ratio(r: stats.Ratio | None, verdict: bool = True) -> dict[str, Any] | None:
        """A ratio's value and interval (none with one process a side); a speedup's verdict
        (an efficiency has none: faster or slower than what?)."""
        if r is None:
            return None
        judged = r.judged
        out: dict[str, Any] = {
            "value": round(r.value, 4),
            "low": round(r.low, 4) if judged else None,
            "high": round(r.high, 4) if judged else None,
        }
        return {**out, "verdict": r.verdict} if verdict else out

    return {
        "title": m.title,
        "scaling": m.scaling,
        "headers": m.headers,
        "rows": m.rows,
        "points": [
            {
                "policy": p.policy,
                "batch_size": p.batch_size,
                "devices": p.devices,
                "global_batch": p.global_batch,
                "per_device_batch": p.per_device_batch,
                "images_per_s": p.images_per_s,
                "images_per_s_per_device": p.per_device_images_per_s,
                "efficiency": ratio(p.efficiency, verdict=False),
                "superlinear": p.superlinear,
                "speedup_vs_float32": ratio(p.speedup),
                "shared_cores": p.shared_cores,
                "independent": None
                if p.reference is None
                else {
                    "images_per_s": p.reference.images_per_s,
                    "kept": ratio(p.reference.kept, verdict=False),
                    "flagged": p.reference.flagged,
                },
            }
            for p in m.points
        ],
        "health": [reference.as_dict(h) for h, _ in m.health],
        "notes": m.notes,
    }


def columns(maps: Sequence[Map]) -> dict[int, dict[str, Any]]:
    """The CSV's map columns of each record the maps show (by ``id``)."""
    out: dict[int, dict[str, Any]] = {}
    for m in maps:
        for p in m.points:
            eff = p.efficiency
            judged = eff is not None and eff.judged
            cols = {
                "global_batch": p.global_batch,
                "per_device_batch": p.per_device_batch,
                "scaling_efficiency": round(eff.value, 4) if eff is not None else None,
                "scaling_efficiency_low": round(eff.low, 4) if judged and eff else None,
                "scaling_efficiency_high": round(eff.high, 4) if judged and eff else None,
                "superlinear": p.superlinear,
                "shared_cores": p.shared_cores,
                **reference.reference_columns(p.reference),
            }
            for r in p.records:
                out[id(r)] = cols
        for h, records in m.health:
            for r in records:
                out[id(r)] = out.get(id(r), {}) | reference.health_columns(h)
    return out
