"""Winning records -> one table per (host, device, image, setup), laid out like the post's.

Rows are batch sizes, columns policies. A slot (policy, batch size) normally holds one cell;
with ``repeats`` > 1 it holds several, and shows the median of their medians (and of their
quartiles). A slot with no ``ok`` record shows the status of its latest attempt. The
setup that chooses a table is every parameter whose role is ``setup``
(:mod:`mxbench.matrix.params`): a different image size or backend is a different experiment.
"""

from __future__ import annotations

import math
import operator
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import msgspec
from msgspec.structs import astuple

from mxbench import stats
from mxbench.matrix import params
from mxbench.matrix.params import BASELINE, POLICIES, Params
from mxbench.records import summary
from mxbench.records.record import Device, Image, Record
from mxbench.report.devices import Capability, capability, cc_from_name
from mxbench.report.load import latest
from mxbench.roofs import recorded
from mxbench.roofs.model import Roof

SETUP = params.names("setup")
# a parameters struct's setup values, from msgspec.structs.astuple of it
_setup_values = operator.itemgetter(*(Params.__struct_fields__.index(n) for n in SETUP))
_taken = operator.itemgetter(*SETUP)  # a table's setup values, from its setup


def _setup(p: Params) -> dict[str, Any]:
    """The setup parameters' values, by name (in :data:`SETUP`'s order)."""
    return dict(zip(SETUP, _setup_values(astuple(p)), strict=True))


MAX_RECORD_TEXT = 300  # characters of one value taken from a record (a name, an error's line)


def bounded(value: str, limit: int = MAX_RECORD_TEXT) -> str:
    """A value from a record as the report shows it: at most ``limit`` characters."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def last_line(error: str | None) -> str | None:
    """An error's last line as the report shows a reason: its whitespace collapsed, bounded
    (None: no error text)."""
    lines = (error or "").strip().splitlines()
    return bounded(" ".join(lines[-1].split())) if lines else None


def _bounded_names(device: Device, image: Image) -> tuple[Device, Image]:
    """The device and image with their names bounded (a table's title and every format
    show them; the records keep them whole)."""
    if device.name and len(device.name) > MAX_RECORD_TEXT:
        device = msgspec.structs.replace(device, name=bounded(device.name))
    if any(v and len(v) > MAX_RECORD_TEXT for v in (image.name, image.id)):
        name, id_ = image.name, image.id
        image = msgspec.structs.replace(image, name=name and bounded(name), id=id_ and bounded(id_))
    return device, image


# NVML's utilisation is the busy share of its last sample period, up to 1 s long (GPU
# dependent): over a shorter timed window it reads whatever the GPU did before (seen on an
# H100: 0 % for 50 steps of 2.7 ms that kept it busy).
NVML_PERIOD_MS = 1000.0


@dataclass(slots=True)
class Entry:
    """One slot of a table: a policy at a batch size."""

    status: str
    records: list[Record]  # the ok records when there are any, else every attempt
    median: float | None = None
    p25: float | None = None
    p75: float | None = None
    n: int | None = None
    # What diagnosis needs from the records, gathered once.
    gpu_util_min: float | None = None  # the lowest GPU utilisation recorded, %
    # a record's utilisation left out: its timed steps were too short for NVML to judge
    util_unjudged: bool = False
    tflops_max: float | None = None  # the best achieved TFLOP/s recorded
    tf32_off: bool = False  # a record ran with TF32 disabled
    pure_float16: bool = False  # a record ran pure float16 (no master weights, no scaling)
    # NVML throttle reasons seen (one empty set for every entry without: most of them)
    throttled: frozenset[str] = frozenset()
    temperature_max: float | None = None  # the hottest the GPU got in a timed window, °C
    # (batch size, images/s) of the last :meth:`images_per_s`: the rows, the roofs and the
    # JSON each ask for a slot's at its own batch size
    _rate: tuple[int, float | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def run(self) -> str | None:
        """The run (``--label``) its records come from (one: :func:`latest_run`)."""
        return self.records[0].label if self.records else None

    def loss(self) -> tuple[float, int] | None:
        """(sum, count) of the training losses of every timed step of every ok record (the
        sum NaN when one was not finite; :func:`mxbench.records.summary.loss`); None: none."""
        total, count = 0.0, 0
        for r in self.records:
            if r.status == "ok" and (part := summary.loss(r)) is not None:
                total, count = total + part[0], count + part[1]
        return (total, count) if count else None

    def images_per_s(self, batch: int) -> float | None:
        """Sustained throughput: the median over the ok records of their images/s over the
        timed window; from the median step time for records without it (None: nothing
        timed). Found once for a batch size (an entry is not changed once made)."""
        said = self._rate
        if said is not None and said[0] == batch:
            return said[1]
        rates = [
            r.metrics.images_per_s
            for r in self.records
            if r.status == "ok" and r.metrics.images_per_s
        ]
        if rates:
            rate: float | None = statistics.median(rates)
        else:
            rate = batch * 1000 / self.median if self.median else None
        self._rate = (batch, rate)
        return rate

    def processes(self) -> list[stats.Process]:
        return summary.processes(self.records)


# A policy's mean training loss over the timed steps may differ from float32's by this
# much (relative) before the report flags it: same seed and data, only rounding differs.
LOSS_TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class Parity:
    """How a policy's training loss compares with float32's at the same batch size."""

    state: Literal["diverged", "differs", "matches", "no baseline"]
    loss: float | None  # mean loss over the timed steps (None: diverged)
    base: float | None = None  # float32's
    diff: float | None = None  # relative difference from float32's

    @property
    def trusted(self) -> bool:
        """A speedup with this loss is a speedup."""
        return self.state != "diverged"

    def text(self) -> str:
        if self.state == "diverged":
            return "loss diverged (non-finite)"
        if self.state == "differs" and self.diff is not None:
            return f"loss {self.diff:+.0%} vs float32"
        return ""


def mean_loss(e: Entry) -> float | None:
    """The mean training loss over the timed steps (NaN: a step's loss was not finite;
    None: no loss recorded)."""
    found = e.loss()
    if found is None:
        return None
    total, count = found
    return total / count if math.isfinite(total) else math.nan


def parity(mean: float | None, ref: float | None) -> Parity | None:
    """Loss parity of a slot from its mean loss and float32's at the same batch size (None:
    the slot recorded no loss; ``ref`` None: float32 did not, or this is float32)."""
    if mean is None:
        return None
    if math.isnan(mean):
        return Parity("diverged", None)
    if ref is None or math.isnan(ref):
        return Parity("no baseline", mean)
    diff = (mean - ref) / abs(ref) if ref else (0.0 if mean == ref else math.inf)
    return Parity("differs" if abs(diff) > LOSS_TOLERANCE else "matches", mean, ref, diff)


@dataclass
class Table:
    host: str
    device: Device
    image: Image
    setup: dict[str, Any]
    info: Record  # the latest record (ok preferred): what the heading describes
    entries: dict[tuple[str, int], Entry]
    policies: list[str]
    batches: list[int]
    # (policy, batch) -> the speedup over float32 with its interval, where both ran
    # (filled by :func:`build`, for every table at once).
    ratios: dict[tuple[str, int], stats.Ratio] = field(default_factory=dict)
    # (policy, batch) -> its training loss against float32's (filled by :func:`build`)
    parity: dict[tuple[str, int], Parity] = field(default_factory=dict)
    # setup parameters the title names because another table's title would read the same
    # (filled by :func:`build`)
    distinct: tuple[str, ...] = ()
    # whether the title names the default model too (other tables measured other models)
    named_model: bool = False
    # (policy, batch) -> every winning record of the slot: its entry keeps only the ok ones
    # of its latest run; the frame has a row for each (mxbench.report.frame)
    cells: dict[tuple[str, int], list[Record]] = field(default_factory=dict)

    @cached_property
    def capability(self) -> tuple[Capability | None, bool]:
        """The GPU's capability, and whether it was inferred from the name (not recorded)."""
        cap = capability(self.device.compute_capability)
        if cap is not None:
            return cap, False
        return capability(cc_from_name(self.device.name)), True

    @cached_property
    def roofs(self) -> Sequence[Roof]:
        """The roofs of the table's device (:func:`mxbench.roofs.recorded.roofs_of` of the
        record the heading describes), found once for every section that judges against them."""
        return recorded.roofs_of(self.info)

    @property
    def device_name(self) -> str:
        return self.device.name or self.device.kind or "unknown device"

    @cached_property
    def carries(self) -> frozenset[str]:
        """Which optional parts (``profile``, ``pairing``, ``convergence``, ``model``, a
        ``repeats: auto`` run's ``auto_repeats``, an ``energy`` figure, a ``cost`` per hour)
        any record of its entries has: a diagnosis rule, a column or a heading line whose
        evidence no record carries has nothing to say, and is not walked (most tables carry
        none)."""
        found = set()
        for e in self.entries.values():
            for r in e.records:
                if r.profile is not None:
                    found.add("profile")
                if r.pairing is not None:
                    found.add("pairing")
                if r.convergence is not None:
                    found.add("convergence")
                if r.model is not None:
                    found.add("model")
                if r.run.get("auto_repeats"):
                    found.add("auto_repeats")
                if r.metrics.energy_j_per_image:
                    found.add("energy")
                if r.cost_per_hour:
                    found.add("cost")
        return frozenset(found)

    @cached_property
    def labels(self) -> dict[str, int]:
        """Run label (bounded) -> how many of the table's cells it measured, most first."""
        counts: dict[str, int] = {}  # a plain dict: a Counter's set-up was most of it
        for e in self.entries.values():
            if e.records and (label := e.records[0].label):
                counts[label] = counts.get(label, 0) + 1
        if not counts:
            return {}  # most tables: no run was labelled
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return {bounded(label): n for label, n in ranked}

    @cached_property
    def by_batch(self) -> list[tuple[tuple[str, int], Entry]]:
        """Its slots ((policy, batch), entry) by batch size, then policy name."""
        return sorted(self.entries.items(), key=lambda kv: (kv[0][1], kv[0][0]))

    @cached_property
    def mixes_runs(self) -> bool:
        """Whether its slots come from more than one run (label)."""
        return len({e.run for e in self.entries.values()}) > 1

    def other_run(self, slot: tuple[str, int]) -> str | None:
        """The slot's run label when the table mixes runs and it is not the table's main
        one (the run that measured most of its cells), else None."""
        e = self.entries.get(slot)
        if e is None or not self.mixes_runs:
            return None
        main = next(iter(self.labels), None)
        return None if bounded(e.run or "") == main else bounded(e.run or "unlabelled")

    @property
    def image_name(self) -> str | None:
        return self.image.name or self.image.id

    @cached_property
    def title(self) -> str:
        parts = [self.host, self.device_name]
        model = str(self.setup.get("model") or "")
        if model and (self.named_model or model != params.field("model").default):
            parts.append(bounded(Path(model).name))  # a zoo name, or a user's file.py:build
        if self.image_name:
            parts.append(f"image {self.image_name}")
        backend = self.setup.get("backend")
        if backend and backend != params.field("backend").default:
            parts.append(f"backend {backend}")
        return " · ".join(parts + self._distinct_parts())

    def _distinct_parts(self) -> list[str]:
        """The title's last parts: the setup values that tell it from a like table's."""
        return [f"{name} {bounded(self.told(name))}" for name in self.distinct]

    def told(self, name: str) -> str:
        """A setup value as the cells asked for it, and as the model took it where that
        differs (a model with a fixed input: ``64 asked, 40 taken``)."""
        asked, took = getattr(self.info.params, name, None), self.setup[name]
        return str(took) if asked is None or asked == took else f"{asked} asked, {took} taken"

    def trusted(self, slot: tuple[str, int]) -> bool:
        """Whether the slot's speedup is one: its loss did not diverge (or was not recorded)."""
        loss = self.parity.get(slot)
        return loss is None or loss.trusted

    def speedup(self, policy: str, batch: int) -> float | None:
        """float32 median / policy median, when both ran."""
        ratio = self.ratios.get((policy, batch))
        return ratio.value if ratio is not None else None

    @cached_property
    def reduced(self) -> list[str]:
        """Policies compared against float32 (none when the table has no float32 column)."""
        if BASELINE not in self.policies:
            return []
        return [p for p in self.policies if p != BASELINE]


def _policy_rank(policy: str) -> tuple[int, str]:
    return (POLICIES.index(policy), policy) if policy in POLICIES else (len(POLICIES), policy)


def timed_window_ms(rec: Record) -> float | None:
    """How long the timed steps lasted (median x count), when the record says."""
    step = rec.step
    if step is None or step.median is None or not step.n:
        return None
    return step.median * step.n


def _add_facts(e: Entry, rec: Record) -> None:
    m, settings = rec.metrics, rec.settings
    util = m.gpu_util_pct
    if util is not None:
        window = timed_window_ms(rec)
        if window is not None and window < NVML_PERIOD_MS:
            e.util_unjudged = True
        elif e.gpu_util_min is None or util < e.gpu_util_min:
            e.gpu_util_min = util
    rate = m.achieved_tflops
    if rate is not None and (e.tflops_max is None or rate > e.tflops_max):
        e.tflops_max = rate
    if settings.tf32 is False:
        e.tf32_off = True
    if settings.pure_float16:
        e.pure_float16 = True
    health = m.gpu_health
    if health is not None:
        e.throttled = e.throttled.union(health.throttle_reasons)
        hot = health.temperature_max_c
        if hot is not None and (e.temperature_max is None or hot > e.temperature_max):
            e.temperature_max = hot


def entry(records: list[Record]) -> Entry:
    if len(records) == 1:  # most slots: one record, its figures as they are
        return _single(records[0], records)
    ok = [r for r in records if r.status == "ok"]
    e = Entry("ok" if ok else latest(records).status, records=ok or records)
    for rec in e.records:
        _add_facts(e, rec)
    timed = [s for r in ok if (s := r.step) is not None]
    if len(timed) == 1:
        s = timed[0]
        e.median, e.p25, e.p75, e.n = s.median, s.p25, s.p75, s.n
    elif timed:

        def med(values: list[float | None]) -> float | None:
            known = [v for v in values if v is not None]
            return statistics.median(known) if known else None

        e.median = med([s.median for s in timed])
        e.p25, e.p75 = med([s.p25 for s in timed]), med([s.p75 for s in timed])
        counts = [s.n for s in timed if s.n is not None]
        e.n = sum(counts) if counts else None
    return e


def _single(rec: Record, records: list[Record]) -> Entry:
    """:func:`entry` of a slot of one record (``records``: the list of it)."""
    if rec.status != "ok":
        e = Entry(rec.status, records=records)
        _add_facts(e, rec)
        return e
    e = Entry("ok", records)
    _add_facts(e, rec)
    s = rec.step
    if s is not None:
        e.median, e.p25, e.p75, e.n = s.median, s.p25, s.p75, s.n
    return e


Slots = dict[tuple[str, int], list[Record]]  # (policy, batch size) -> records


def group(winners: list[Record], by_device: bool = True) -> list[Slots]:
    """The records of each table, tables sorted by host, device, image, setup (numbers by
    value). ``by_device=False``: one table per host, image and setup whatever the records say of the
    device (a trial killed for memory has no device facts; the table takes its ok ones')."""
    groups: dict[tuple[Any, ...], Slots] = {}
    # A table's records share their setup values, not their parameters (each has its own
    # policy and batch size): the values are taken as they are, in one call, and a key
    # names a setup by its number (each setup field has one type: equal values, equal texts)
    setups: dict[tuple[Any, ...], int] = {}
    for rec in winners:
        p = rec.params
        raw = _setup_values(astuple(p))
        setup = setups.get(raw)
        if setup is None:
            setup = setups[raw] = len(setups)
        image = rec.image.name or rec.image.id or ""
        if by_device:
            device = rec.device
            key: tuple[Any, ...] = (
                str(rec.host),
                device.kind or "",
                device.name or "",
                image,
                setup,
            )
        else:
            key = (str(rec.host), image, setup)
        slots = groups.get(key)
        if slots is None:
            slots = groups[key] = {}
        slots.setdefault((p.policy, p.batch_size), []).append(rec)
    natural: dict[str, tuple[int, float, str]] = {}  # hosts, names and setups repeat

    def nat(v: str) -> tuple[int, float, str]:
        return natural.get(v) or natural.setdefault(v, _natural(v))

    by_setup = [tuple(nat(str(v)) for v in raw) for raw in setups]  # in their numbers' order

    def order(key: tuple[Any, ...]) -> tuple[tuple[int, float, str], ...]:
        return (*map(nat, key[:-1]), *by_setup[key[-1]])

    return [groups[k] for k in sorted(groups, key=order)]


def _natural(value: str) -> tuple[int, float, str]:
    """A number by its value (image_size 64 before 128), anything else as text after."""
    try:
        number = float(value)
    except ValueError:
        return (1, 0.0, value)
    return (0, number, value) if math.isfinite(number) else (1, 0.0, value)


def latest_run(records: list[Record]) -> list[Record]:
    """The records of one slot that its latest run (label) measured: processes of different
    runs are never pooled into one figure (a run cut short under a new label does not borrow
    the old run's repeats)."""
    if len(records) == 1:
        return records
    label = latest(records).label
    return [r for r in records if r.label == label]


def make(slots: Slots) -> Table:
    """One table from its records (one :func:`group`)."""
    every = [r for recs in slots.values() for r in recs]
    ok = [r for r in every if r.status == "ok"]
    info = latest(ok or every)
    device, image = _bounded_names(info.device, info.image)
    return Table(
        host=bounded(str(info.host)),
        device=device,
        image=image,
        setup=_setup(info.params) | image_taken(info),
        info=info,
        entries={  # (most slots: one record, its own entry)
            slot: _single(recs[0], recs) if len(recs) == 1 else entry(latest_run(recs))
            for slot, recs in slots.items()
        },
        policies=sorted({p for p, _ in slots}, key=_policy_rank),
        batches=sorted({b for _, b in slots}),
        cells=slots,
    )


def image_input(rec: Record) -> tuple[int, int] | None:
    """The image input, height and width: as the model took it (``model.image_input``),
    else as the cell asked; None where neither says."""
    took = image_taken(rec)
    height = took["image_size"] if took else rec.params.image_size
    width = took["image_width"] if took else rec.params.image_width
    return (height, width or height) if height else None


def image_taken(rec: Record) -> dict[str, int | None]:
    """``image_size`` and ``image_width`` as the model took them, where the record says
    (``model.image_input``): a model with a fixed input shows its own, not what the cell
    asked; nothing for a record without it (older, or a model without an image input)."""
    took = rec.model.image_input if rec.model is not None else None
    if not took or len(took) != 2:
        return {}
    height, width = took
    return {"image_size": height, "image_width": None if width == height else width}


def build(winners: list[Record]) -> list[Table]:
    """Every table, in :func:`group`'s order, with its speedup intervals."""
    # Batch-size search trials make the largest-batch tables (report.capacity), not these;
    # serving cells their own section (report.inference).
    timing = [r for r in winners if r.search is None and r.params.mode == "train"]
    built = [make(slots) for slots in group(timing)]
    where: list[tuple[Table, tuple[str, int]]] = []
    paired_where: list[tuple[Table, tuple[str, int]]] = []
    pairs = []
    groups: list[list[stats.Process]] = []
    for t in built:
        entries = t.entries
        means = {slot: m for slot, e in entries.items() if (m := mean_loss(e)) is not None}
        if not means and not any(e.median for e in entries.values()):
            continue  # no loss, no step time: no parity, no speedup
        for (policy, batch), other in entries.items():
            base = entries.get((BASELINE, batch))
            ref = means.get((BASELINE, batch)) if policy != BASELINE else None
            loss = parity(means.get((policy, batch)), ref)
            if loss is not None:
                t.parity[policy, batch] = loss
            if policy != BASELINE and base is not None and base.median and other.median:
                if (together := summary.paired(other.records)) is not None:
                    paired_where.append((t, (policy, batch)))
                    groups.append(together)
                else:
                    where.append((t, (policy, batch)))
                    pairs.append((base.processes(), other.processes()))
    judged = [
        *zip(where, stats.judge(pairs), strict=True),
        *zip(paired_where, stats.judge_paired(groups), strict=True),
    ]
    for (t, slot), ratio in judged:
        if ratio is not None:
            t.ratios[slot] = ratio
    _tell_apart(built)
    return built


def _tell_apart(built: list[Table]) -> None:
    """Tables whose titles would read the same (one host, device and image; setups that
    differ in image_size, data, jit_compile...) name in their titles the parameters that
    differ: the summary's rows and the headings are told apart. With several models, the
    default model's tables name it too."""
    if len({str(t.setup.get("model") or "") for t in built}) > 1:
        for t in built:
            t.named_model = True
            t.__dict__.pop("title", None)
    same: dict[str, list[Table]] = {}
    for t in built:
        same.setdefault(t.title, []).append(t)
    for group_ in same.values():
        if len(group_) < 2:
            continue
        names = _differing(group_)
        for t in group_:
            base = t.title  # (made above, without them)
            t.distinct = names
            t.title = " · ".join([base, *t._distinct_parts()])


def _differing(group_: list[Table]) -> tuple[str, ...]:
    """The setup names whose :meth:`Table.told` differs between the tables: told only where
    the values asked or taken differ (equal pairs tell the same; most names are the same in
    every table)."""
    values = [(*_setup_values(astuple(t.info.params)), *_taken(t.setup)) for t in group_]
    first, n = values[0], len(SETUP)
    which = {
        i % n for v in values[1:] for i, (a, b) in enumerate(zip(first, v, strict=True)) if a != b
    }
    return tuple(
        name
        for i, name in enumerate(SETUP)
        if i in which and len({t.told(name) for t in group_}) > 1
    )
