"""``mxbench compare`` as a document of its own, built once and rendered by the report's
renderers (:func:`mxbench.report.render.markdown.render_compare`,
:func:`mxbench.report.render.export.write_compare`): the command only loads, builds and exits.

Parts, in order: the cells timed on both sides (the change and its verdict), the cells that
ran on one side and failed on the other, the cells one side has alone, the counts, the
measured noise floor, and the speedups over float32 in both runs with how each policy's
moved. Each table part keeps its data (``items``: what the JSON writes) beside its rows of
text (what markdown shows).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mxbench import stats
from mxbench.report.compare import Alone, Change, Comparison, Failed, SpeedupChange
from mxbench.report.text import STATUS_TEXT

ALONE_SHOWN = 20  # cells one side has alone, shown per list (the JSON has every one)


@dataclass
class Part:
    """A titled table of a comparison: its rows as text, the data they come from."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    items: Sequence[Any]  # the cells, failures or speedups the rows show (the JSON's)
    more: int = 0  # rows left out (every one is in items)


@dataclass
class CompareDocument:
    changes: Part  # shown (with --only-changed: those with a verdict); counts cover all
    broke: Part
    fixed: Part
    only_base: Part
    only_new: Part
    failed_both: Part
    counts: str
    floor: str | None  # the measured noise floor, when a host has one
    speedups: Part
    moved: list[str] = field(default_factory=list)  # per policy, how its speedup moved


def varying(rows: Sequence[Any]) -> list[str]:
    """The parameters besides policy and batch size whose values differ between the rows
    (model, image_size, backend...): without their columns two rows would read the same."""
    names: dict[str, set[Any]] = {}
    for row in rows:
        for name, value in row.params.items():
            if name not in ("policy", "batch_size"):
                names.setdefault(name, set()).add(value)
    return [name for name, values in names.items() if len(values) > 1]


def _where(c: Any, more: list[str]) -> list[str]:
    """host, image, the varying parameters, policy and batch of a row."""
    return [
        c.host,
        c.image or "-",
        *(str(c.params.get(n)) for n in more),
        str(c.params["policy"]),
        str(c.params["batch_size"]),
    ]


def _changes(shown: list[Change]) -> Part:
    more = varying(shown)
    headers = ["host", "image", *more, "policy", "batch"]
    headers += ["base ms", "new ms", "change [95% CI]", "verdict"]
    rows = [
        [
            *_where(c, more),
            f"{c.base_ms:.2f}",
            f"{c.new_ms:.2f}",
            f"{c.change:+.1%}"
            + ("" if c.low is None or c.high is None else f" [{c.low:+.1%} – {c.high:+.1%}]"),
            ("REGRESSION" if c.regressed else c.verdict)
            + (" (below the noise floor)" if c.below_floor else ""),
        ]
        for c in shown
    ]
    return Part("", headers, rows, shown)


def _failures(title: str, cells: list[Failed], columns: tuple[str, str]) -> Part:
    """The cells that ran on one side and failed on the other, with the failure."""
    more = varying(cells)
    headers = ["host", "image", *more, "policy", "batch", *columns, "error"]
    rows = [
        [
            *_where(c, more),
            f"{c.timed_ms:.2f}",
            STATUS_TEXT.get(c.status, c.status),
            c.error or "",
        ]
        for c in cells
    ]
    return Part(title, headers, rows, cells)


def _alone(title: str, cells: list[Alone]) -> Part:
    """The cells one side has and the other has not at all, the first :data:`ALONE_SHOWN`."""
    more = varying(cells)
    headers = ["host", "image", *more, "policy", "batch", "status"]
    rows = [[*_where(c, more), STATUS_TEXT.get(c.status, c.status)] for c in cells[:ALONE_SHOWN]]
    return Part(title, headers, rows, cells, max(0, len(cells) - ALONE_SHOWN))


def _counts(found: Comparison, regressed: int, threshold: float) -> str:
    few = sum(1 for c in found.changes if c.verdict == stats.TOO_FEW)
    return (
        f"{len(found.changes)} cell(s) compared, {regressed} regression(s) "
        f"(slower by more than {threshold:g}%, interval excluding no change); "
        f"{len(found.broke)} ran in base and failed in new, {len(found.fixed)} failed "
        f"in base and ran in new; {len(found.only_base)} only in base, "
        f"{len(found.only_new)} only in new, {len(found.failed_both)} failed in both."
        + (
            f" {few} cell(s) with one process on a side: {stats.TOO_FEW} for a verdict "
            f"({stats.HINT})."
            if few
            else ""
        )
    )


def _ratio(value: float, low: float, high: float, verdict: str | None) -> str:
    text = stats.figure(value)
    return text if verdict is None else f"{text} [{stats.figure(low)}–{stats.figure(high)}]"


def _speedups(found: list[SpeedupChange]) -> tuple[Part, list[str]]:
    """The speedup over float32 in both runs, per slot, and how each policy's moved."""
    more = varying(found)
    headers = ["host", "image", *more, "policy", "batch", "speedup base", "speedup new", "gained"]
    rows = [
        [
            *_where(s, more),
            _ratio(s.base, s.base_low, s.base_high, s.base_verdict),
            _ratio(s.new, s.new_low, s.new_high, s.new_verdict),
            f"{stats.figure(s.gained, sign=True)}x" + (" (intervals apart)" if s.clear else ""),
        ]
        for s in found
    ]
    by_policy: dict[str, list[float]] = {}
    for s in found:
        by_policy.setdefault(str(s.params["policy"]), []).append(s.gained)
    moved = []
    for policy, gains in by_policy.items():
        said = (statistics.median(gains), min(gains), max(gains))
        median, low, high = (stats.figure(g, sign=True) for g in said)
        moved.append(
            f"{policy}: the speedup over float32 moved by {median}x "
            f"(median of {len(gains)} slot(s), {low}x to {high}x)."
        )
    return Part("Speedup over float32 in each run:", headers, rows, found), moved


def build(
    found: Comparison,
    gains: list[SpeedupChange],
    measured: dict[str, float],
    threshold: float,
    only_changed: bool,
) -> CompareDocument:
    """``threshold`` in percent; ``only_changed``: only the cells with a verdict and the
    speedups that clearly changed (the counts still cover every cell)."""
    changes = found.changes
    shown = [c for c in changes if c.verdict != stats.SAME] if only_changed else changes
    regressed = sum(1 for c in changes if c.regressed)
    floor = None
    if measured:
        below = sum(1 for c in changes if c.below_floor)
        said = ", ".join(f"{h} ±{f:.1%}" for h, f in measured.items())
        floor = (
            f"Measured noise floor per process (mxbench doctor --noise): "
            f"{said}; {below} change(s) are below it."
        )
    speedups, moved = _speedups([s for s in gains if s.clear] if only_changed else gains)
    return CompareDocument(
        changes=_changes(shown),
        broke=_failures(
            "Ran in base, failed in new (a regression):", found.broke, ("base ms", "new")
        ),
        fixed=_failures("Failed in base, ran in new:", found.fixed, ("new ms", "base")),
        only_base=_alone("Only in base (not in new at all):", found.only_base),
        only_new=_alone("Only in new (not in base at all):", found.only_new),
        failed_both=_alone(
            "Failed in both (timed on neither side; status in new):", found.failed_both
        ),
        counts=_counts(found, regressed, threshold),
        floor=floor,
        speedups=speedups,
        moved=moved,
    )
