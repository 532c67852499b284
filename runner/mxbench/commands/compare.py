"""``mxbench compare BASE NEW``: per cell, the change in step time, its interval, a verdict."""

from __future__ import annotations

import sys
from pathlib import Path

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
    as_json: bool = typer.Option(False, "--json", help="JSON instead of a markdown table."),
) -> None:
    """Compare two runs of the same matrix, cell by cell (matched by host, image and
    parameters): median step time before and after, the change with its 95%
    interval, and a verdict. Exit 1 when any cell regressed; made for CI checks of a driver,
    CUDA or framework upgrade. BASE and NEW may be the same directory with two labels.
    """
    import msgspec

    from mxbench.report import load
    from mxbench.report.compare import compare as diff
    from mxbench.report.markdown import escape, table
    from mxbench.stats import HINT, TOO_FEW

    loaded = [load.load([base], label=base_label), load.load([new], label=new_label)]
    for side in loaded:
        for bad in side.bad[:20]:
            where = f"{bad.path}:{bad.lineno}" if bad.lineno else str(bad.path)
            typer.echo(f"mxbench: warning: {where}: {bad.reason} (skipped)", err=True)
    changes, only_base, only_new = diff(loaded[0], loaded[1], threshold / 100)
    if not changes:
        raise UsageError(
            f"no cell was timed in both {base} and {new} (same host, image and parameters)"
        )
    regressed = [c for c in changes if c.regressed]
    if as_json:
        sys.stdout.write(msgspec.json.encode(changes).decode() + "\n")
    else:
        headers = ["host", "image", "policy", "batch", "base ms", "new ms", "change [95% CI]",
                   "verdict"]  # fmt: skip
        rows = [
            [c.host, c.image or "-", str(c.params["policy"]), str(c.params["batch_size"]),
             f"{c.base_ms:.2f}", f"{c.new_ms:.2f}",
             f"{c.change:+.1%}" + ("" if c.low is None or c.high is None
                                   else f" [{c.low:+.1%} – {c.high:+.1%}]"),
             ("REGRESSION" if c.regressed else c.verdict)]
            for c in changes
        ]  # fmt: skip
        typer.echo(table(headers, rows))
        few = sum(1 for c in changes if c.verdict == TOO_FEW)
        typer.echo(
            escape(
                f"\n{len(changes)} cell(s) compared, {len(regressed)} regression(s) "
                f"(slower by more than {threshold:g}%, interval excluding no change); "
                f"{only_base} only in base, {only_new} only in new."
                + (
                    f" {few} cell(s) with one process on a side: {TOO_FEW} for a verdict ({HINT})."
                    if few
                    else ""
                )
            )
        )
    if regressed:
        raise MxbenchError(f"{len(regressed)} cell(s) regressed by more than {threshold:g}%")
