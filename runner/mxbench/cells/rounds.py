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

    def round_s(self, shared: bool = False) -> float:
        """About how long one more process per policy takes (0 before any ran). A paired
        process from its records' phases (:func:`paired_process_s`): the start and the
        framework's import (none where ``shared``: another comparison of its family is
        measured in the same process this round) and this comparison's part of the
        process's passes; not the one-off profile and check of a first process, nor the
        passes of other batch sizes, which its processes so far also measured."""
        if not self.wall_s:
            return 0.0
        paired = any(r.pairing is not None for r in self.records.values())
        if not paired:
            return statistics.fmean(self.wall_s) * len(self.policies)
        by_process: dict[str, list[Record]] = {}
        for r in self.records.values():
            if r.pairing is not None and r.pairing.group:
                by_process.setdefault(r.pairing.group, []).append(r)
        found = [x for x in map(paired_process_s, by_process.values()) if x is not None]
        if not found:
            return statistics.fmean(self.wall_s)
        start = 0.0 if shared else statistics.fmean(s for s, _ in found)
        return start + statistics.fmean(own for _, own in found)


STARTUP_PHASES = ("start", "probe", "import")  # a process's own, whatever it measures
ONE_OFF_PHASES = ("profile", "check")  # a cell's first process's only


def paired_process_s(arms: list[Record]) -> tuple[float, float] | None:
    """A paired process's start-up seconds, and the seconds of the comparison whose arms'
    records ``arms`` are: the process's wall time past its start-up and one-off phases,
    times the comparison's share of the process's steps (its arms' warm-ups and windows,
    of every pass's). None where the records do not say (no phases)."""
    phases, wall = arms[0].metrics.phases_s, arms[0].run.get("wall_s")
    if not phases or not isinstance(wall, int | float):
        return None
    steps = sum(phases.get(k, 0.0) for k in ("first_step", "warmup", "timed"))
    own = sum(
        (r.metrics.warmup_ms or 0.0) / 1000.0
        + sum(w.ms * w.steps for w in r.pairing.windows) / 1000.0
        for r in arms
        if r.pairing is not None
    )
    if not steps > 0:
        return None
    start = sum(phases.get(k, 0.0) for k in STARTUP_PHASES)
    rest = wall - start - sum(phases.get(k, 0.0) for k in ONE_OFF_PHASES)
    return start, max(0.0, rest) * min(1.0, own / steps)


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
