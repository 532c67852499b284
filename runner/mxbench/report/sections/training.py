"""Training runs and the input pipeline's share: two answers beside the speed tables.

**To the same accuracy.** Records of training runs (``params.epochs``, ``record.train``) are
grouped by everything but policy and seed. float32's seeds give a band (the lowest and
highest validation accuracy at each evaluation, widened by one binomial standard error of
the validation split); each policy is judged against it: *within
float32's band*, *converges slower than float32's band* (its mean curve below the band at
most evaluations), or *ends below float32's band* (at the last evaluation). With a target,
each policy's time to it (median over seeds, and how many seeds reached it) and the
**time-to-accuracy speedup** over float32 with its 95% interval over seeds: each seed's time
is one process, so :func:`mxbench.stats.speedup` (Welch's t over the processes' log times)
judges it as it judges step times. The sentence says it as a share of float32's time
("reaches 90% in 0.71× the time [0.62–0.81]").

**The input pipeline's share.** Timing cells that differ only in ``data`` (synthetic against
a folder) at the same batch size: the real data's extra time per step as a share of its
step, ``1 - synthetic / real``, with the interval of the same ratio ("the input pipeline
costs 41% [35–47%] of the step"). **Host overhead**, the same way: ``steps_per_execution``
k against 1 ("steps_per_execution 10 saves 12% [5–18%] of the step"). **Loss scaling's
cost**, the same way: each ``loss_scale`` value against ``none`` (else ``auto``)
("loss_scale dynamic costs 6% [3–9%] of the step against none").
"""

from __future__ import annotations

import math
import operator
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mxbench import stats
from mxbench.matrix.params import BASELINE, SYNTHETIC
from mxbench.records import summary
from mxbench.records.record import Record
from mxbench.report.tables import image_input

DASH = "–"


@dataclass
class Run:
    """One policy of a training group: its seeds' records."""

    policy: str
    records: list[Record]

    @property
    def finals(self) -> list[float]:
        return [
            r.train.points[-1].val_metric or 0.0 for r in self.records if r.train and r.train.points
        ]

    @property
    def times(self) -> list[float]:
        """Time to target of the seeds that reached it."""
        return [
            r.train.time_to_target_s
            for r in self.records
            if r.train and r.train.time_to_target_s is not None
        ]


@dataclass
class Section:
    title: str
    target: float | None
    runs: list[Run]
    headers: list[str]
    rows: list[list[str]]
    sentences: list[str] = field(default_factory=list)


def _group_key(r: Record) -> tuple[str, bytes]:
    p = msgspec.structs.replace(r.params, policy=BASELINE, repeat=None)
    return (r.host or "", msgspec.json.encode(p))


def _title(r: Record) -> str:
    p = r.params
    hw = image_input(r)  # the input the model took, where the record says
    size = f"{hw[0]}x{hw[1]}" if hw else "the model's own input"
    device = r.device.name or r.host or "?"
    return (
        f"{p.model} on {Path(p.data).name or p.data} at {size}, batch {p.batch_size}, "
        f"{p.epochs} epochs ({r.host}, {device}, {p.backend})"
    )


def float32_band(base: Run) -> dict[int, tuple[float, float]]:
    """float32's lowest and highest validation accuracy at each evaluated epoch, each widened
    by one binomial standard error of an accuracy on the validation split (a few seeds can
    agree to the image by chance: the split's own sampling noise is the least a band is)."""
    at: dict[int, list[float]] = {}
    n = min((r.train.val_images or 0 for r in base.records if r.train), default=0)
    for r in base.records:
        for pt in r.train.points if r.train else ():
            if pt.val_metric is not None:
                at.setdefault(pt.epoch, []).append(pt.val_metric)

    def se(a: float) -> float:
        return math.sqrt(max(a * (1 - a), 0.0) / n) if n else 0.0

    return {e: (min(v) - se(min(v)), max(v) + se(max(v))) for e, v in at.items()}


def band_verdict(run: Run, band: dict[int, tuple[float, float]]) -> str:
    """How the policy's mean curve sits against float32's band."""
    at: dict[int, list[float]] = {}
    for r in run.records:
        for pt in r.train.points if r.train else ():
            if pt.val_metric is not None and pt.epoch in band:
                at.setdefault(pt.epoch, []).append(pt.val_metric)
    if not at:
        return "no evaluation"
    mean = {e: stats.mean(v) for e, v in at.items()}
    below = [e for e, m in mean.items() if m < band[e][0]]
    last = max(mean)
    if mean[last] < band[last][0]:
        return "ends below float32's band"
    if len(below) > len(mean) / 2:
        return "converges slower than float32's band"
    return "within float32's band"


def _spread(values: Sequence[float], fmt: str) -> str:
    if not values:
        return DASH
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} [{format(min(values), fmt)}{DASH}{format(max(values), fmt)}]"


def time_ratio(base: Run, other: Run) -> stats.Ratio | None:
    """float32's time to target / the policy's, with its interval over seeds (processes)."""
    return stats.speedup([[t] for t in base.times], [[t] for t in other.times])


def verdict_sentence(
    policy: str, target: float, r: stats.Ratio | None, n: int, reached: int
) -> str:
    goal = f"{target:.0%}"
    if reached == 0:
        return f"{policy} does not reach {goal} in any of {n} seeds"
    if r is None:
        return f"{policy} reaches {goal} ({reached}/{n} seeds); float32 does not"
    frac = f"{stats.figure(1 / r.value)}×"
    part = "" if reached == n else f" ({reached}/{n} seeds reach it)"
    if not r.judged:
        return f"{policy} reaches {goal} in {frac} float32's time{part} ({stats.TOO_FEW})"
    span = f"[{stats.figure(1 / r.high)}{DASH}{stats.figure(1 / r.low)}]"
    word = {stats.FASTER: "sooner", stats.SLOWER: "later", stats.SAME: "no clear difference"}
    return (
        f"{policy} reaches {goal} in {frac} {span} float32's time{part}: "
        f"{word.get(r.verdict, r.verdict)}"
    )


def sections(records: Iterable[Record]) -> list[Section]:
    groups: dict[tuple[str, bytes], list[Record]] = {}
    for r in records:
        if r.status == "ok" and r.train is not None and r.params.epochs:
            groups.setdefault(_group_key(r), []).append(r)
    out = []
    for members in groups.values():
        by_policy: dict[str, list[Record]] = {}
        for r in sorted(members, key=lambda r: (r.params.policy != BASELINE, r.params.repeat or 0)):
            by_policy.setdefault(r.params.policy, []).append(r)
        runs = [Run(p, rs) for p, rs in by_policy.items()]
        target = members[0].params.target
        out.append(_section(_title(members[0]), target, runs))
    return out


def _section(title: str, target: float | None, runs: list[Run]) -> Section:
    base = next((r for r in runs if r.policy == BASELINE), None)
    band = float32_band(base) if base else {}
    goal = f"{target:.0%}" if target else None
    headers = ["policy", "seeds", "final val accuracy", "vs float32's band"]
    if goal:
        headers += [f"time to {goal} (s)", "reached", "speedup (float32 time / policy's)"]
    rows, sentences = [], []
    for run in runs:
        n = len(run.records)
        row = [
            run.policy,
            str(n),
            _spread(run.finals, ".3f"),
            "(the band)" if run is base else band_verdict(run, band) if band else DASH,
        ]
        if goal and target:
            times = run.times
            row += [_spread(times, ".1f"), f"{len(times)}/{n}"]
            ratio = time_ratio(base, run) if base and run is not base else None
            row.append(ratio.text() if ratio else DASH)
            if run is not base:
                sentences.append(verdict_sentence(run.policy, target, ratio, n, len(times)))
        if run is not base and band:
            sentences.append(f"{run.policy}: {band_verdict(run, band)}")
        rows.append(row)
    if goal:
        sentences += _resolution(runs, goal)
    sentences += [x for run in runs if (x := stuck_at_chance(run))]
    return Section(title, target, runs, headers, rows, sentences)


def _resolution(runs: list[Run], goal: str) -> list[str]:
    """How finely the times to target are known."""
    res = [
        r.train.target_resolution_s
        for run in runs
        for r in run.records
        if r.train and r.train.target_resolution_s is not None
    ]
    if not res:
        return []
    return [
        f"Times to {goal} are interpolated between the two evaluations around the crossing "
        f"(linear in training time); the time between them, the resolution, is "
        f"{_spread(res, '.1f')} s: a difference smaller than that is not measured"
    ]


# Validation accuracy within this of chance (1 / classes, at least 0.05) counts as at chance;
# training accuracy at least this high (and 3x chance) while it is, counts as learning.
CHANCE_MARGIN = 0.5
LEARNING = 0.6


def stuck_at_chance(run: Run) -> str | None:
    """A validation curve at chance while training accuracy is high, named: the usual
    suspect is batch normalization's moving statistics (what validation uses) lagging the
    trained weights, so the time to target then mostly times that lag closing."""
    seen: dict[str, list[str]] = {}  # the epochs at chance -> the seeds
    train_acc: list[float] = []
    lost: list[float] = []  # share of each seed's time to target spent at chance
    bn = 0
    for r in run.records:
        t = r.train
        if t is None or not t.classes:
            continue
        chance = 1.0 / t.classes
        near = chance + max(0.05, CHANCE_MARGIN * chance)
        epochs = [
            pt.epoch
            for pt in t.points
            if pt.val_metric is not None
            and pt.val_metric <= near
            and (pt.train_metric or 0.0) >= max(LEARNING, 3 * chance)
        ]
        if epochs:
            seen.setdefault(_epochs(epochs), []).append(str(t.seed or 0))
            at = next(pt.train_s for pt in t.points if pt.epoch == epochs[-1])
            if t.time_to_target_s and at is not None:
                lost.append(min(1.0, at / t.time_to_target_s))
            train_acc += [pt.train_metric or 0.0 for pt in t.points if pt.epoch in epochs]
            layers = r.model.layers if r.model else {}
            bn = max(bn, sum(n for k, n in layers.items() if "Normalization" in k and "Batch" in k))
    if not seen:
        return None
    first = next(r.train for r in run.records if r.train and r.train.classes)
    assert first is not None and first.classes
    why = (
        f"the model has {bn} batch normalization layer(s), which validate with moving "
        "statistics that lag the trained weights for the first hundreds of steps (a lower "
        "momentum, more steps per epoch or a longer run closes the gap)"
        if bn
        else "the model has no batch normalization: check the validation split's labels "
        "and preprocessing against the training split's"
    )
    where = "; ".join(
        f"{e} of seed{'s' if len(k) > 1 else ''} {', '.join(k)}" for e, k in seen.items()
    )
    share = statistics.median(lost) if lost else None
    cost = (
        ""
        if share is None
        else ". The time to target mostly times that gap closing, not learning: "
        if share >= 0.5
        else ". "
    ) + (f"{share:.0%} of it passes at chance" if share is not None else "")
    return (
        f"{run.policy}: validation accuracy at chance ({1 / first.classes:.2f}, "
        f"{first.classes} classes) at {where} while training accuracy was "
        f"{_spread(train_acc, '.2f')}: {why}{cost}"
    )


def _epochs(epochs: list[int]) -> str:
    if len(epochs) == 1:
        return f"epoch {epochs[0]}"
    return f"epochs {epochs[0]}{DASH}{epochs[-1]}"


# --------------------------------------------------------------------------- one-parameter A/Bs


def _ab(
    records: Iterable[Record], name: str, base: Any
) -> list[tuple[Any, list[Record], list[Record]]]:
    """Timing cells that differ only in parameter ``name``: per setup, each value other than
    ``base`` with the records at ``base`` (the processes of each side)."""
    records = list(records)
    values = set(map(operator.attrgetter(f"params.{name}"), records))
    if values <= {base} or base not in values:
        return []  # no A/B in these records (most reports): no setup keys to make
    sides: dict[tuple[str, bytes], dict[Any, list[Record]]] = {}
    for r in records:
        if r.step is None or r.params.epochs or r.params.mode != "train":
            continue  # training runs and serving cells (report.inference) are no A/B here
        same = msgspec.structs.replace(r.params, **{name: base, "repeat": None})
        key = (r.host or "", msgspec.json.encode(same))
        sides.setdefault(key, {}).setdefault(getattr(r.params, name), []).append(r)
    out = []
    for found in sides.values():
        at_base = found.pop(base, None)
        for value, other in sorted(found.items(), key=lambda kv: str(kv[0])):
            if at_base:
                out.append((value, other, at_base))
    return out


def _ratio(slow: list[Record], fast: list[Record]) -> tuple[stats.Ratio | None, list[float]]:
    """``slow``'s step time / ``fast``'s with its interval, and each side's median ms."""
    sides = [[q for q in map(summary.process, side) if q is not None] for side in (slow, fast)]
    r = stats.judge([(sides[0], sides[1])])[0]
    ms = [statistics.median(x.step.median or 0.0 for x in side if x.step) for side in (slow, fast)]
    return r, ms


def _span(r: stats.Ratio) -> str:
    """The share ``1 - 1/ratio`` with its interval: what the slower side's extra time is
    of its step."""
    share = 1 - 1 / r.value
    if not r.judged:
        return f"{share:.0%} ({stats.TOO_FEW})"
    return f"{share:.0%} [{1 - 1 / r.low:.0%}{DASH}{1 - 1 / r.high:.0%}]"


def _said(
    r: stats.Ratio | None,
    none: str,
    longer: str,
    shorter: str,
    same: str,
) -> str:
    """The A/B sentence for ``r``, the first side's step over the second's: ``none`` without
    a comparison, else ``longer`` / ``shorter`` / ``same`` as the first side's step is the
    longer one (or too few processes to tell), the shorter one, or neither clearly, with
    ``{span}`` replaced by the share (:func:`_span`; replaced, not formatted: a folder's name
    may hold braces)."""
    if r is None:
        return none
    if r.verdict in (stats.FASTER, stats.TOO_FEW):
        said = longer
    else:
        said = shorter if r.verdict == stats.SLOWER else same
    return said.replace("{span}", _span(r))


def _where(r: Record) -> str:
    p, hw = r.params, image_input(r)
    size = (
        "the model's own input"
        if not hw
        else f"{hw[0]} px"
        if hw[0] == hw[1]
        else f"{hw[0]}x{hw[1]} px"
    )
    return f"batch {p.batch_size}, {size}, {p.policy}, {r.host}"


def input_shares(records: Iterable[Record]) -> list[str]:
    """The input pipeline's share of the step: per setup, a folder against synthetic data."""
    out = []
    for folder, real, synth in _ab(records, "data", SYNTHETIC):
        r, ms = _ratio(real, synth)
        where = (
            f"{Path(folder).name or folder} at {_where(real[0])}: "
            f"{ms[0]:.2f} ms/step real vs {ms[1]:.2f} synthetic"
        )
        out.append(
            _said(
                r,
                f"the input pipeline: no comparison ({where})",
                f"the input pipeline costs {{span}} of the step ({where})",
                f"real data ran faster than synthetic, {{span}} ({where}): something else varied",
                f"no clear input-pipeline cost: {{span}} of the step ({where})",
            )
        )
    return out


# The heading every format gives :func:`shares`' sentences.
AB_TITLE = "Input pipeline, host overhead and loss scaling: A/B at the same batch"


AB_NAMES = ("data", "steps_per_execution", "loss_scale")  # the parameters shares compares


def shares(records: Sequence[Record]) -> list[str]:
    """Every one-parameter A/B the records hold: input pipeline, host overhead, loss
    scaling."""
    values: dict[str, set[Any]] = {name: set() for name in AB_NAMES}  # one pass: most have none
    for r in records:
        p = r.params
        values["data"].add(p.data)
        values["steps_per_execution"].add(p.steps_per_execution)
        values["loss_scale"].add(p.loss_scale)
    if all(len(v) < 2 for v in values.values()):
        return []
    return input_shares(records) + overhead_shares(records) + loss_scale_costs(records)


def loss_scale_costs(records: Sequence[Record]) -> list[str]:
    """Loss scaling's cost: per setup, each ``loss_scale`` value against ``none`` (else
    ``auto``): the step-time change with its interval."""
    if len(set(map(operator.attrgetter("params.loss_scale"), records))) < 2:
        return []  # one value in every record (most reports): none to compare
    values = {r.params.loss_scale for r in records if r.step is not None}
    if len(values) < 2:
        return []
    base = next((v for v in ("none", "auto") if v in values), min(values))
    out = []
    for value, other, at_base in _ab(records, "loss_scale", base):
        r, ms = _ratio(other, at_base)
        where = f"{_where(other[0])}: {ms[0]:.2f} ms/step with {value} vs {ms[1]:.2f} with {base}"
        out.append(
            _said(
                r,
                f"loss_scale {value}: no comparison with {base} ({where})",
                f"loss_scale {value} costs {{span}} of the step against {base} ({where})",
                (
                    f"loss_scale {value} ran faster than {base}, {{span}} ({where}): scaling "
                    "itself saves nothing, something else varied"
                ),
                f"loss_scale {value}: no clear cost against {base}, {{span}} of the step ({where})",
            )
        )
    return out


def overhead_shares(records: Iterable[Record]) -> list[str]:
    """The host-overhead A/B: per setup, steps_per_execution k against 1."""
    out = []
    for k, many, one in _ab(records, "steps_per_execution", 1):
        r, ms = _ratio(one, many)
        where = f"{_where(one[0])}: {ms[0]:.2f} ms/step at 1 vs {ms[1]:.2f} at {k}"
        out.append(
            _said(
                r,
                f"steps_per_execution {k}: no comparison ({where})",
                (
                    f"steps_per_execution {k} saves {{span}} of the step: per-call host "
                    f"overhead ({where})"
                ),
                f"steps_per_execution {k} is slower ({where})",
                f"steps_per_execution {k}: no clear change, {{span}} ({where})",
            )
        )
    return out


def as_dict(s: Section) -> dict[str, Any]:
    """A section for the JSON report: the table as rows of named cells, and the verdicts."""
    return {
        "title": s.title,
        "target": s.target,
        "sentences": s.sentences,
        "rows": [dict(zip(s.headers, row, strict=True)) for row in s.rows],
    }
