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

    from mxbench.report import compare_document
    from mxbench.report.compare import compare as diff
    from mxbench.report.compare import floors, speedups
    from mxbench.report.render import export, markdown

    loaded = _load(base, new, base_label, new_label)
    found = diff(loaded[0], loaded[1], threshold / 100)
    changes = found.changes
    dirs = [p if p.is_dir() else p.parent for p in (new, base)]
    measured = floors(changes, dirs)
    if not changes and not found.broke and not found.fixed:
        raise UsageError(
            f"no cell was timed in both {base} and {new} (same host, image and parameters)"
        )
    gains = speedups(loaded[0], loaded[1])
    doc = compare_document.build(found, gains, measured, threshold, only_changed)
    if as_json:
        export.write_compare(doc, sys.stdout)
    else:
        typer.echo(markdown.render_compare(doc), nl=False)
    regressed = [c for c in changes if c.regressed]
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
    from mxbench.records.store import bad_line_warnings
    from mxbench.report import load

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
