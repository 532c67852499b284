"""Winning records -> one table per (host, device, image, setup), laid out like the post's.

Rows are batch sizes, columns policies. A slot (policy, batch size) normally holds one cell;
with ``repeats`` > 1 it holds several, and shows the median of their medians (and of their
quartiles). A slot with no ``ok`` record shows the status of its latest attempt.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mxbench.report.devices import Capability, capability, cc_from_name
from mxbench.report.load import detail, latest

POLICY_ORDER = ("float32", "mixed_float16", "mixed_bfloat16", "float16")
BASELINE = "float32"
# Params that place a record inside a table rather than choosing the table. steps and
# warmup_steps change how precisely a cell is measured, not what is measured.
_NOT_SETUP = frozenset({"policy", "batch_size", "repeat", "steps", "warmup_steps"})


@dataclass(slots=True)
class Entry:
    """One slot of a table: a policy at a batch size."""

    status: str
    median: float | None = None
    p25: float | None = None
    p75: float | None = None
    n: int | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    # What diagnosis needs from the records, gathered once here (see _add_facts).
    gpu_util_min: float | None = None  # the lowest GPU utilisation recorded, %
    tflops_max: float | None = None  # the best achieved TFLOP/s recorded
    tf32_off: bool = False  # a record ran with TF32 disabled
    pure_float16: bool = False  # a record ran pure float16 (no master weights, no scaling)


@dataclass
class Table:
    host: str
    device: dict[str, Any]
    image: dict[str, Any]
    setup: dict[str, Any]
    info: dict[str, Any]  # the latest record (ok preferred): what the heading describes
    entries: dict[tuple[str, int], Entry]
    policies: list[str]
    batches: list[int]

    @cached_property
    def capability(self) -> tuple[Capability | None, bool]:
        """The GPU's capability, and whether it was inferred from the name (not recorded)."""
        cap = capability(self.device.get("compute_capability"))
        if cap is not None:
            return cap, False
        return capability(cc_from_name(self.device.get("name"))), True

    @property
    def device_name(self) -> str:
        return str(self.device.get("name") or self.device.get("kind") or "unknown device")

    @property
    def image_name(self) -> str | None:
        name = self.image.get("name") or self.image.get("id")
        return str(name) if name else None

    @property
    def title(self) -> str:
        parts = [self.host, self.device_name]
        if self.image_name:
            parts.append(f"image {self.image_name}")
        return " · ".join(parts)

    def speedup(self, policy: str, batch: int) -> float | None:
        """float32 median / policy median, when both ran."""
        return self.speedups.get((policy, batch))

    @cached_property
    def speedups(self) -> dict[tuple[str, int], float]:
        """(policy, batch) -> float32 median / policy median, for every slot where both ran."""
        out = {}
        for (policy, batch), other in self.entries.items():
            base = self.entries.get((BASELINE, batch))
            if base is not None and base.median is not None and other.median:
                out[policy, batch] = base.median / other.median
        return out

    @cached_property
    def reduced(self) -> list[str]:
        """Policies compared against float32 (none when the table has no float32 column)."""
        if BASELINE not in self.policies:
            return []
        return [p for p in self.policies if p != BASELINE]


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: object) -> float | None:
    kind = type(value)
    if kind is float:
        return value  # type: ignore[return-value]
    if kind is int or (kind is not bool and isinstance(value, (int, float))):
        return float(value)  # type: ignore[arg-type]
    return None


def _policy_rank(policy: str) -> tuple[int, str]:
    try:
        return POLICY_ORDER.index(policy), policy
    except ValueError:
        return len(POLICY_ORDER), policy


def _step(rec: dict[str, Any]) -> dict[str, Any] | None:
    step = _dict(_dict(rec.get("metrics")).get("step_ms"))
    return step if _num(step.get("median")) is not None else None


def _add_facts(e: Entry, rec: dict[str, Any]) -> None:
    metrics, settings = rec.get("metrics"), rec.get("settings")
    if type(metrics) is dict:
        util = _num(metrics.get("gpu_util_pct"))
        if util is not None and (e.gpu_util_min is None or util < e.gpu_util_min):
            e.gpu_util_min = util
        rate = _num(metrics.get("achieved_tflops"))
        if rate is not None and (e.tflops_max is None or rate > e.tflops_max):
            e.tflops_max = rate
    if type(settings) is dict:
        if settings.get("tf32") is False:
            e.tf32_off = True
        if settings.get("pure_float16"):
            e.pure_float16 = True


def entry(records: list[dict[str, Any]]) -> Entry:
    if len(records) == 1:  # the common case, kept cheap for large fleets
        rec = records[0]
        status = rec["status"]
        e = Entry(status, records=records)
        _add_facts(e, rec)
        if status == "ok" and (step := _step(rec)) is not None:
            n = step.get("n")
            e.median, e.p25, e.p75 = (
                _num(step["median"]),
                _num(step.get("p25")),
                _num(step.get("p75")),
            )
            e.n = n if type(n) is int else None
        return e
    ok = [r for r in records if r["status"] == "ok"]
    e = Entry("ok" if ok else latest(records)["status"], records=ok or records)
    for rec in e.records:
        _add_facts(e, rec)
    timed = [s for r in ok if (s := _step(r)) is not None]
    if not timed:
        return e

    def med(key: str) -> float | None:
        values = [v for s in timed if (v := _num(s.get(key))) is not None]
        return statistics.median(values) if values else None

    counts = [s["n"] for s in timed if isinstance(s.get("n"), int)]
    e.median, e.p25, e.p75 = med("median"), med("p25"), med("p75")
    e.n = sum(counts) if counts else None
    return e


def _placement(params: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[str, int]]:
    """Where a record's params put it: the setup that picks the table, and the slot in it."""
    setup = tuple(sorted((k, v) for k, v in params.items() if k not in _NOT_SETUP))
    try:
        hash(setup)
    except TypeError:  # a list or an object as a param value
        setup = tuple((k, repr(v)) for k, v in setup)
    return setup, (str(params["policy"]), params["batch_size"])


Slots = dict[tuple[str, int], list[dict[str, Any]]]  # (policy, batch size) -> records


def group(winners: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], Slots]]:
    """The records of each table, with the key that orders the tables: host, device, image,
    setup (as text). Tables come sorted by it."""
    groups: dict[tuple[Any, ...], Slots] = {}
    # A fleet has few distinct params (policies x batch sizes x setups), but each record has
    # its own dict: placing each distinct one once keeps 100,000 records cheap.
    placed: dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[str, int]]] = {}
    for rec in winners:
        params = rec["params"]
        try:
            ident: tuple[Any, ...] | None = tuple(params.items())
            where = placed.get(ident)  # type: ignore[arg-type]
        except TypeError:  # unhashable param values
            ident = where = None
        if where is None:
            where = _placement(params)
            if ident is not None:
                placed[ident] = where
        device, image = rec.get("device"), rec.get("image")
        if type(device) is not dict:
            device = {}
        if type(image) is not dict:
            image = {}
        key = (rec["host"], device.get("kind"), device.get("name"),
               image.get("name") or image.get("id"), where[0])  # fmt: skip
        slots = groups.get(key)
        if slots is None:
            slots = groups[key] = {}
        slot = slots.get(where[1])
        if slot is None:
            slots[where[1]] = [rec]
        else:
            slot.append(rec)
    keyed = [(tuple(map(str, key)), slots) for key, slots in groups.items()]
    keyed.sort(key=lambda pair: pair[0])
    return keyed


def make(slots: Slots) -> Table:
    """One table from its records (one :func:`group`). The heading describes the latest
    record (ok preferred), read whole again if it was loaded without its bulky fields."""
    entries = {slot: entry(recs) for slot, recs in slots.items()}
    every = [r for recs in slots.values() for r in recs]
    ok = [r for r in every if r["status"] == "ok"]
    info = detail(latest(ok or every))
    params = info["params"]
    return Table(
        host=str(every[0]["host"]),
        device=_dict(info.get("device")),
        image=_dict(info.get("image")),
        setup={k: v for k, v in params.items() if k not in _NOT_SETUP},
        info=info,
        entries=entries,
        policies=sorted({p for p, _ in slots}, key=_policy_rank),
        batches=sorted({b for _, b in slots}),
    )


def build(winners: list[dict[str, Any]]) -> list[Table]:
    """Every table, in :func:`group`'s order."""
    return [make(slots) for _, slots in group(winners)]
