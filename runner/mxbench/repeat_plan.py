"""The run's planner for ``repeats: auto``: the comparison groups of a run's cells, the
records filed under them, and each group's next round of cells.

The rule that decides whether a group needs more processes is :mod:`mxbench.cells.repeats`
(a pure function of the group's records, low in the house); this module sits above the
matrix and the cells, whose keys it makes for the processes it adds. The budget and the
rounds are the orchestrator's (:mod:`mxbench.orchestrate`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from mxbench.cells.cell import cell_key
from mxbench.cells.repeats import AutoRepeats, Decision
from mxbench.matrix.params import BASELINE
from mxbench.records.record import FINAL_STATUSES, Record
from mxbench.report.diagnosis.busy import busy


def noise(records: Iterable[Record]) -> str:
    """What the machine was doing during these records' timed windows, in words (paired
    records measure it): '' when nothing was measured."""

    found = busy(records)
    return f"{found.text()} during the timed windows" if found is not None else ""


@dataclass
class Group:
    """The cells of one comparison: one per (policy, repeat), the same otherwise."""

    label: str
    template: Any  # a mxbench.cells.cell.Cell of the group (any policy, any repeat)
    policies: list[str]
    limits: dict[str, Any] | None
    keys: dict[tuple[str, int], str] = field(default_factory=dict)  # (policy, repeat) -> key
    records: dict[str, Record] = field(default_factory=dict)  # cell key -> latest record
    wall_s: list[float] = field(default_factory=list)  # wall time of the processes run
    decision: Decision | None = None  # set when the group stopped

    @property
    def attempts(self) -> int:
        return 1 + max(r for _, r in self.keys) if self.keys else 0

    def by_policy(self) -> dict[str, list[Record]]:
        out: dict[str, list[Record]] = {p: [] for p in self.policies}
        for (policy, _), key in sorted(self.keys.items(), key=lambda kv: kv[0][1]):
            rec = self.records.get(key)
            if rec is not None:
                out[policy].append(rec)
        return out

    def cell(self, policy: str, repeat: int) -> Any:
        """The group's cell for one policy and repeat (key as :func:`cells.expand` makes it)."""
        t = self.template
        params = msgspec.structs.replace(t.params, policy=policy, repeat=repeat)
        key = cell_key(t.host, t.image, t.image_spec, params, self.limits, t.model_source)
        self.keys[policy, repeat] = key
        return replace(t, params=params, key=key)

    def round_s(self) -> float:
        """About how long one more process per policy takes (0 before any ran)."""
        if not self.wall_s:
            return 0.0
        paired = any(r.pairing is not None for r in self.records.values())
        return statistics.fmean(self.wall_s) * (1 if paired else len(self.policies))


@dataclass
class Plan:
    """Every comparison group of a run, and where each stands."""

    cfg: AutoRepeats
    groups: list[Group]
    by_key: dict[str, Group] = field(default_factory=dict)

    def note(self, record: Record) -> None:
        """File a record of this run (or one ``--resume`` keeps) under its group."""
        group = self.by_key.get(record.cell or "")
        if group is not None:
            group.records[record.cell or ""] = record
            wall = record.run.get("wall_s")
            if isinstance(wall, int | float):
                group.wall_s.append(float(wall))

    def host(self, name: str) -> list[Group]:
        return [g for g in self.groups if g.template.host == name]

    def extend(self, group: Group, repeat: int) -> list[Any]:
        """The group's cells of one more round (policies in plan order)."""
        cells = [group.cell(p, repeat) for p in group.policies]
        for c in cells:
            self.by_key[c.key] = group
        return cells

    def summary(self) -> list[str]:
        """Where each group stopped, one line each (for the end of ``mxbench run``)."""
        return [f"{g.label}: {g.decision.text()}" for g in self.groups if g.decision is not None]


def plan(cfg: AutoRepeats, cells: Iterable[Any], limits: dict[str, Any]) -> Plan:
    """The groups of the planned cells (all of them, done ones too: ``--resume`` needs
    their records); ``limits``: each host's limits, as the cell keys hash them."""
    groups: dict[tuple[Any, ...], Group] = {}
    out = Plan(cfg, [])
    for c in cells:
        p = c.params
        if p.epochs or p.mode == "infer":  # a training run's repeats are seeds; a serving
            continue  # cell's are judged by its latency (report.inference): the start, not grown
        ident = msgspec.structs.replace(p, policy=BASELINE, repeat=None)
        gkey = (c.host, c.image, ident, c.model_source)
        g = groups.get(gkey)
        if g is None:
            g = groups[gkey] = Group(c.label(group=True), c, [], limits.get(c.host))
            out.groups.append(g)
        if p.policy not in g.policies:
            g.policies.append(p.policy)
        g.keys[p.policy, p.repeat or 0] = c.key
        out.by_key[c.key] = g
    return out


def known(plan: Plan, records: dict[str, Record]) -> None:
    """File the stored records (``--resume``) of the planned cells under their groups."""
    for key, rec in records.items():
        if key in plan.by_key and rec.status in FINAL_STATUSES:
            plan.note(rec)
