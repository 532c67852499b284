"""``mxbench compare BASE NEW``: per cell, the change in step time, its interval, a verdict."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from mxbench.errors import MxbenchError, UsageError


def compare(
    base: Path = typer.Argument(..., help="Baseline results: a directory or a JSONL file."),
    new: Path = typer.Argument(..., help="Results to check: a directory or a JSONL file."),
    base_label: str | None = typer.Option(
        None, "--base-label", help="Only BASE records of `mxbench run --label NAME`."
    ),
    new_label: str | None = typer.Option(
        None, "--new-label", help="Only NEW records of `mxbench run --label NAME`."
    ),
    threshold: float = typer.Option(
        5.0,
        "--threshold",
        min=0.0,
        help="Slower by more than this many percent, with an "
        "interval that excludes no change, is a regression (exit 1).",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="JSON instead of markdown: one object (schema mxbench.compare/1) with the cells, "
        "the speedups over float32 in both runs, the cells only one side has, and those "
        "that failed on both.",
    ),
    only_changed: bool = typer.Option(
        False,
        "--only-changed",
        help="Only the cells whose verdict is faster or slower (and the speedups that "
        "clearly changed); the counts still cover every cell.",
    ),
) -> None:
    """Compare two runs of the same matrix, cell by cell (matched by host, image and
    parameters): median step time before and after, the change with its 95% interval (over
    processes) and a verdict. Then the answer itself in both runs: the speedup of each
    policy over float32 before and after ("mixed precision gained 0.30x"). Rows sorted by
    host, image, policy and batch size. Exit 1 when any cell regressed or ran in BASE and
    failed in NEW (OOM, error, timeout); made for CI checks of
    a driver, CUDA or framework upgrade. BASE and NEW may be the same directory with two
    labels.
    """

    from mxbench.report.compare import compare as diff
    from mxbench.report.compare import floors, speedups

    loaded = _load(base, new, base_label, new_label)
    found = diff(loaded[0], loaded[1], threshold / 100)
    changes = found.changes
    dirs = [p if p.is_dir() else p.parent for p in (new, base)]
    measured = floors(changes, dirs)
    if not changes and not found.broke and not found.fixed:
        raise UsageError(
            f"no cell was timed in both {base} and {new} (same host, image and parameters)"
        )
    regressed = [c for c in changes if c.regressed]
    shown = [c for c in changes if c.verdict != "no clear difference"] if only_changed else changes
    if as_json:
        _json(shown, speedups(loaded[0], loaded[1]), only_changed, found)
    else:
        ups = speedups(loaded[0], loaded[1])
        _markdown(shown, found, regressed, measured, threshold, ups, only_changed)
    why = []
    if regressed:
        why.append(f"{len(regressed)} cell(s) regressed by more than {threshold:g}%")
    if found.broke:
        why.append(f"{len(found.broke)} cell(s) ran in base and failed in new")
    if why:
        raise MxbenchError("; ".join(why))


def _load(base: Path, new: Path, base_label: str | None, new_label: str | None) -> list[Any]:
    """BASE's and NEW's records (lean), saying which lines were unreadable; UsageError when a
    side is missing or its label matches none of its records."""
    from mxbench.report import load
    from mxbench.store import bad_line_warnings

    for name, path in (("BASE", base), ("NEW", new)):
        if not os.path.lexists(path):  # not the report's "--results PATH" wording
            raise UsageError(f"{name} {path}: no such file or directory")
    loaded = [
        load.load([base], label=base_label, lean=True),
        load.load([new], label=new_label, lean=True),
    ]
    for warning in bad_line_warnings([*loaded[0].bad, *loaded[1].bad]):
        typer.echo(warning, err=True)
    for side, path, label in ((loaded[0], base, base_label), (loaded[1], new, new_label)):
        if label is not None and not side.winners and side.read:
            known = ", ".join(sorted(repr(x) for x in side.labels if x is not None)) or "none"
            raise UsageError(
                f"{path}: label {label!r} matches none of the {side.read} records read "
                f"(their labels: {known})"
            )
    return loaded


def _markdown(
    shown: list[Any],
    found: Any,
    regressed: list[Any],
    measured: dict[str, float],
    threshold: float,
    ups: Any,
    only_changed: bool,
) -> None:
    """The comparison as markdown on stdout: the changed cells, the failures, the counts,
    the noise floor, and the speedups over float32 in both runs."""
    from mxbench.report.markdown import escape, table
    from mxbench.stats import HINT, TOO_FEW

    more = _varying(shown)
    headers = [
        "host",
        "image",
        *more,
        "policy",
        "batch",
        "base ms",
        "new ms",
        "change [95% CI]",
        "verdict",
    ]
    rows = [
        [
            c.host,
            c.image or "-",
            *(str(c.params.get(n)) for n in more),
            str(c.params["policy"]),
            str(c.params["batch_size"]),
            f"{c.base_ms:.2f}",
            f"{c.new_ms:.2f}",
            f"{c.change:+.1%}"
            + ("" if c.low is None or c.high is None else f" [{c.low:+.1%} – {c.high:+.1%}]"),
            ("REGRESSION" if c.regressed else c.verdict)
            + (" (below the noise floor)" if c.below_floor else ""),
        ]
        for c in shown
    ]
    typer.echo((table(headers, rows) if rows else "No cell changed.") + "\n")
    _failures("Ran in base, failed in new (a regression):", found.broke, ("base ms", "new"))
    _failures("Failed in base, ran in new:", found.fixed, ("new ms", "base"))
    _alone("Only in base (not in new at all):", found.only_base)
    _alone("Only in new (not in base at all):", found.only_new)
    _alone("Failed in both (timed on neither side; status in new):", found.failed_both)
    few = sum(1 for c in found.changes if c.verdict == TOO_FEW)
    typer.echo(
        escape(
            f"{len(found.changes)} cell(s) compared, {len(regressed)} regression(s) "
            f"(slower by more than {threshold:g}%, interval excluding no change); "
            f"{len(found.broke)} ran in base and failed in new, {len(found.fixed)} failed "
            f"in base and ran in new; {len(found.only_base)} only in base, "
            f"{len(found.only_new)} only in new, {len(found.failed_both)} failed in both."
            + (
                f" {few} cell(s) with one process on a side: {TOO_FEW} for a verdict ({HINT})."
                if few
                else ""
            ),
            limit=None,  # the tool's own sentence: never cut
        )
    )
    if measured:
        below = sum(1 for c in found.changes if c.below_floor)
        said = ", ".join(f"{h} ±{f:.1%}" for h, f in measured.items())
        typer.echo(
            escape(
                f"Measured noise floor per process (mxbench doctor --noise): "
                f"{said}; {below} change(s) are below it.",
                limit=None,
            )
        )
    _speedups(ups, only_changed)


def _failures(title: str, cells: list[Any], columns: tuple[str, str]) -> None:
    """The cells that ran on one side and failed on the other, with the failure."""
    from mxbench.report.markdown import table
    from mxbench.report.text import STATUS_TEXT

    if not cells:
        return
    more = _varying(cells)
    headers = ["host", "image", *more, "policy", "batch", *columns, "error"]
    rows = [
        [
            c.host,
            c.image or "-",
            *(str(c.params.get(n)) for n in more),
            str(c.params["policy"]),
            str(c.params["batch_size"]),
            f"{c.timed_ms:.2f}",
            STATUS_TEXT.get(c.status, c.status),
            c.error or "",
        ]
        for c in cells
    ]
    typer.echo(f"{title}\n\n{table(headers, rows)}\n")


def _alone(title: str, cells: list[Any], limit: int = 20) -> None:
    """The cells one side has and the other has not at all, the first ``limit`` of them."""
    from mxbench.report.markdown import table
    from mxbench.report.text import STATUS_TEXT

    if not cells:
        return
    more = _varying(cells)
    headers = ["host", "image", *more, "policy", "batch", "status"]
    rows = [
        [
            c.host,
            c.image or "-",
            *(str(c.params.get(n)) for n in more),
            str(c.params["policy"]),
            str(c.params["batch_size"]),
            STATUS_TEXT.get(c.status, c.status),
        ]
        for c in cells[:limit]
    ]
    rest = len(cells) - limit
    after = f"\n… and {rest} more (compare --json lists every one)\n" if rest > 0 else ""
    typer.echo(f"{title}\n\n{table(headers, rows)}\n{after}")


def _varying(rows: list[Any]) -> list[str]:
    """The parameters besides policy and batch size whose values differ between the rows
    (model, image_size, backend...): without their columns two rows would read the same."""
    names: dict[str, set[Any]] = {}
    for row in rows:
        for name, value in row.params.items():
            if name not in ("policy", "batch_size"):
                names.setdefault(name, set()).add(value)
    return [name for name, values in names.items() if len(values) > 1]


def _json(
    changes: list[Any], gains: list[Any], only_changed: bool, found: Any, chunk: int = 10_000
) -> None:
    """One JSON object on stdout: the cells (encoded a chunk at a time: a million cells never
    become one string), those that ran on one side only, the speedups in both runs with what
    they gained, the counts."""
    import msgspec

    if only_changed:
        gains = [s for s in gains if s.clear]
    out = sys.stdout
    out.write('{"schema":"mxbench.compare/1","cells":[')
    for start in range(0, len(changes), chunk):
        part = msgspec.json.encode(changes[start : start + chunk])[1:-1].decode()
        out.write(("," if start else "") + part)
    out.write('],"broke":' + msgspec.json.encode(found.broke).decode())
    out.write(',"fixed":' + msgspec.json.encode(found.fixed).decode())
    speed = [{**msgspec.structs.asdict(s), "gained": s.gained} for s in gains]
    out.write(',"speedups":' + msgspec.json.encode(speed).decode())
    out.write(',"only_in_base":' + msgspec.json.encode(found.only_base).decode())
    out.write(',"only_in_new":' + msgspec.json.encode(found.only_new).decode())
    out.write(',"failed_in_both":' + msgspec.json.encode(found.failed_both).decode() + "}\n")


def _speedups(found: list[Any], only_changed: bool) -> None:
    """The speedup over float32 in both runs, per slot, and how it moved."""
    import statistics

    from mxbench import stats
    from mxbench.report.markdown import escape, table

    if only_changed:
        found = [s for s in found if s.clear]
    if not found:
        return

    def ratio(value: float, low: float, high: float, verdict: str | None) -> str:
        text = stats.figure(value)
        return text if verdict is None else f"{text} [{stats.figure(low)}–{stats.figure(high)}]"

    more = _varying(found)
    headers = ["host", "image", *more, "policy", "batch", "speedup base", "speedup new", "gained"]
    rows = [
        [
            s.host,
            s.image or "-",
            *(str(s.params.get(n)) for n in more),
            str(s.params["policy"]),
            str(s.params["batch_size"]),
            ratio(s.base, s.base_low, s.base_high, s.base_verdict),
            ratio(s.new, s.new_low, s.new_high, s.new_verdict),
            f"{stats.figure(s.gained, sign=True)}x" + (" (intervals apart)" if s.clear else ""),
        ]
        for s in found
    ]
    typer.echo("\nSpeedup over float32 in each run:\n")
    typer.echo(table(headers, rows))
    by_policy: dict[str, list[float]] = {}
    for s in found:
        by_policy.setdefault(str(s.params["policy"]), []).append(s.gained)
    for policy, gains in by_policy.items():  # each a paragraph (a line right after a table
        said = (statistics.median(gains), min(gains), max(gains))  # is one more row of it)
        moved, low, high = (stats.figure(g, sign=True) for g in said)
        typer.echo(
            "\n"
            + escape(
                f"{policy}: the speedup over float32 moved by {moved}x "
                f"(median of {len(gains)} slot(s), {low}x to {high}x).",
                limit=None,
            )
        )
