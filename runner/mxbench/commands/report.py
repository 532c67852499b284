"""`mxbench report`: merge result records from any hosts into the experiment's tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from mxbench.errors import MxbenchError, UsageError

MAX_WARNINGS = 50


def report(
    results: list[Path] = typer.Option(
        None,
        "--results",
        "-r",
        help="A results directory (its *.jsonl files) or a JSONL file; repeatable. "
        "Default: ./results.",
    ),
    markdown: bool = typer.Option(
        False, "--markdown", help="GitHub-style markdown tables (the default format)."
    ),
    csv: bool = typer.Option(False, "--csv", help="Tidy CSV: one row per cell."),
    html: bool = typer.Option(
        False, "--html", help="One self-contained HTML page: tables, diagnosis, PNG plots."
    ),
    json_: bool = typer.Option(
        False,
        "--json",
        help="The merged tables as one JSON document (schema mxbench.report/1): per table "
        "its rows with numbers, intervals, verdicts, loss parity, and the diagnosis.",
    ),
    label: str | None = typer.Option(
        None, "--label", "-l", help="Only the records of `mxbench run --label LABEL`."
    ),
    output: Path = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
) -> None:
    """Tables per (host, device, image, setup): ms/step per policy and batch size, the
    speedup over float32 with its 95% interval and a verdict, images/s, device annotations
    and a diagnosis; then a summary across devices.

    Exactly one of --markdown, --csv, --html, --json (markdown when none is given). Several
    attempts of a cell: the latest ok wins, else the latest attempt's status shows (OOM,
    error, timeout, unsupported), and the report says how many older attempts it hides.
    Unreadable lines and files are skipped with a `file:line: reason` warning. Exit 0 ok,
    1 no records found, 2 bad usage (e.g. a --results path that does not exist).
    """
    formats = (("markdown", markdown), ("csv", csv), ("html", html), ("json", json_))
    chosen = [name for name, on in formats if on]
    if len(chosen) > 1:
        raise UsageError(f"choose one output format, not {' and '.join('--' + c for c in chosen)}")
    fmt = chosen[0] if chosen else "markdown"
    sources = list(results) if results else [Path("results")]
    if output is not None and output.is_dir():
        raise UsageError(f"--output {output}: is a directory")
    if not results and not Path("results").exists():
        raise UsageError(
            "no ./results directory here: measure first (mxbench run), or name result "
            "directories or files with --results"
        )

    from mxbench.report import load, tables

    loaded = load.load(sources, label=label)
    for bad in loaded.bad[:MAX_WARNINGS]:
        where = f"{bad.path}:{bad.lineno}" if bad.lineno else str(bad.path)
        typer.echo(f"mxbench: warning: {where}: {bad.reason} (skipped)", err=True)
    if len(loaded.bad) > MAX_WARNINGS:
        more = len(loaded.bad) - MAX_WARNINGS
        typer.echo(f"mxbench: warning: {more} more unreadable line(s) skipped", err=True)
    if not loaded.winners:
        where = ", ".join(str(s) for s in sources)
        which = f" with label {label!r}" if label else ""
        raise MxbenchError(
            f"no result records{which} found in {where}: run `mxbench run` first "
            "(or point --results at result files)"
        )
    built = tables.build(loaded.winners)
    if fmt == "csv":
        from mxbench.report import frame

        text = frame.to_csv(loaded, built)
    elif fmt == "html":
        text = _html(loaded, built)
    elif fmt == "json":
        from mxbench.report import export

        text = export.render(loaded, built)
    else:
        from mxbench.report import markdown as md

        text = md.render(loaded, built)
    _write(text, output)


def _html(loaded: Any, built: list[Any]) -> str:
    from rich.console import Console
    from rich.progress import Progress

    from mxbench.report import html
    from mxbench.report.plot import pngs_base64

    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("tables and plots", total=len(built))
        return html.render(loaded, built, pngs_base64, lambda: progress.advance(task))


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    from mxbench.results import write_atomic

    try:
        write_atomic(output, text.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"--output {output}: {exc.strerror} (nothing written)") from None
    typer.echo(f"mxbench: report written to {output}", err=True)
