"""Winning records -> one table per (host, device, image, setup), laid out like the post's.

Rows are batch sizes, columns policies. A slot (policy, batch size) normally holds one cell;
with ``repeats`` > 1 it holds several, and shows the median of their medians (and of their
quartiles). A slot with no ``ok`` record shows the status of its latest attempt.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mxbench.report.devices import Capability, capability, cc_from_name
from mxbench.report.load import when

POLICY_ORDER = ("float32", "mixed_float16", "mixed_bfloat16", "float16")
BASELINE = "float32"
# Params that place a record inside a table rather than choosing the table. steps and
# warmup_steps change how precisely a cell is measured, not what is measured.
_NOT_SETUP = frozenset({"policy", "batch_size", "repeat", "steps", "warmup_steps"})


@dataclass
class Entry:
    """One slot of a table: a policy at a batch size."""

    status: str
    median: float | None = None
    p25: float | None = None
    p75: float | None = None
    n: int | None = None
    records: list[dict[str, Any]] = field(default_factory=list)


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

    def records(self) -> list[dict[str, Any]]:
        return [r for e in self.entries.values() for r in e.records]

    def ok_records(self) -> list[dict[str, Any]]:
        return [r for e in self.entries.values() if e.status == "ok" for r in e.records]

    def speedup(self, policy: str, batch: int) -> float | None:
        """float32 median / policy median, when both ran."""
        base = self.entries.get((BASELINE, batch))
        other = self.entries.get((policy, batch))
        if not base or not other or base.median is None or not other.median:
            return None
        return base.median / other.median

    @property
    def reduced(self) -> list[str]:
        """Policies compared against float32 (none when the table has no float32 column)."""
        if BASELINE not in self.policies:
            return []
        return [p for p in self.policies if p != BASELINE]


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _policy_rank(policy: str) -> tuple[int, str]:
    try:
        return POLICY_ORDER.index(policy), policy
    except ValueError:
        return len(POLICY_ORDER), policy


def _step(rec: dict[str, Any]) -> dict[str, Any] | None:
    step = _dict(_dict(rec.get("metrics")).get("step_ms"))
    return step if _num(step.get("median")) is not None else None


def entry(records: list[dict[str, Any]]) -> Entry:
    if len(records) == 1:  # the common case, kept cheap for large fleets
        rec = records[0]
        if rec["status"] != "ok":
            return Entry(status=rec["status"], records=records)
        step = _step(rec)
        if step is None:
            return Entry(status="ok", records=records)
        n = step.get("n")
        return Entry("ok", _num(step["median"]), _num(step.get("p25")), _num(step.get("p75")),
                     n if isinstance(n, int) else None, records)  # fmt: skip
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        latest = max(records, key=when)
        return Entry(status=latest["status"], records=records)
    timed = [s for r in ok if (s := _step(r)) is not None]
    if not timed:
        return Entry(status="ok", records=ok)

    def med(key: str) -> float | None:
        values = [v for s in timed if (v := _num(s.get(key))) is not None]
        return statistics.median(values) if values else None

    counts = [s["n"] for s in timed if isinstance(s.get("n"), int)]
    return Entry(
        status="ok",
        median=med("median"),
        p25=med("p25"),
        p75=med("p75"),
        n=sum(counts) if counts else None,
        records=ok,
    )


def _table_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    device = rec.get("device") or {}
    image = rec.get("image") or {}
    if not isinstance(device, dict):
        device = {}
    if not isinstance(image, dict):
        image = {}
    setup = tuple(sorted((k, v) for k, v in rec["params"].items() if k not in _NOT_SETUP))
    try:
        hash(setup)
    except TypeError:  # a list or an object as a param value
        setup = tuple((k, repr(v)) for k, v in setup)
    return (
        rec["host"],
        device.get("kind"),
        device.get("name"),
        image.get("name") or image.get("id"),
        setup,
    )


def _same(rec: dict[str, Any]) -> dict[str, Any]:
    return rec


def build(
    winners: list[dict[str, Any]],
    detail: Callable[[dict[str, Any]], dict[str, Any]] = _same,
) -> list[Table]:
    """Tables in a stable order: host, device, image, setup.

    ``detail`` gives the whole record behind a heading when the winners were read without
    their bulky fields (:func:`mxbench.report.load.detail`).
    """
    groups: dict[tuple[str, ...], dict[tuple[str, int], list[dict[str, Any]]]] = {}
    for rec in winners:
        params = rec["params"]
        slots = groups.setdefault(_table_key(rec), {})
        slots.setdefault((str(params["policy"]), params["batch_size"]), []).append(rec)
    tables = []
    for key in sorted(groups, key=lambda k: tuple(map(str, k))):
        slots = groups[key]
        entries = {slot: entry(recs) for slot, recs in slots.items()}
        every = [r for recs in slots.values() for r in recs]
        ok = [r for r in every if r["status"] == "ok"]
        info = detail(max(ok or every, key=when))
        params = info["params"]
        tables.append(
            Table(
                host=str(key[0]),
                device=_dict(info.get("device")),
                image=_dict(info.get("image")),
                setup={k: v for k, v in params.items() if k not in _NOT_SETUP},
                info=info,
                entries=entries,
                policies=sorted({p for p, _ in slots}, key=_policy_rank),
                batches=sorted({b for _, b in slots}),
            )
        )
    return tables
