"""`mxbench report`: merge result records from any hosts into the experiment's tables."""

from __future__ import annotations

import gc
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mxbench.errors import MxbenchError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from mxbench.report.tables import Table

MAX_WARNINGS = 50


def report(
    results: list[Path] = typer.Option(
        None,
        "--results",
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
    output: Path = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
    jobs: int = typer.Option(
        0,
        "--jobs",
        "-j",
        min=0,
        help="Processes for the markdown report of a large fleet (result files are split "
        "between them by host). 0: one per CPU, up to 8; 1: this process only.",
    ),
) -> None:
    """Tables per (host, device, image): ms/step per policy and batch size, speedups over
    float32, device annotations and a diagnosis; then a summary across devices.

    Exactly one of --markdown, --csv, --html (markdown when none is given). Several
    attempts of a cell: the latest ok wins, else the latest attempt's status shows
    (OOM, error, timeout, unsupported). Unreadable lines are skipped with a warning.
    Exit 0 ok, 1 no records found, 2 bad usage (e.g. a --results path that does not exist).
    """
    chosen = [name for name, on in (("markdown", markdown), ("csv", csv), ("html", html)) if on]
    if len(chosen) > 1:
        raise UsageError(f"choose one output format, not {' and '.join('--' + c for c in chosen)}")
    fmt = chosen[0] if chosen else "markdown"
    sources = list(results) if results else [Path("results")]
    if output is not None and output.is_dir():
        raise UsageError(f"--output {output}: is a directory")

    from rich.console import Console

    from mxbench.report import load, pipeline, render, tables

    # A short-lived process building ~100 small objects per record: the cyclic garbage
    # collector would rescan them all again and again (measured: a third of the run time).
    gc.disable()
    err = Console(stderr=True)
    if fmt == "markdown":  # the large-fleet path: spread over processes (pipeline)
        loaded, text = pipeline.markdown(sources, jobs or None)
    else:
        with err.status("reading results", spinner="dots") if err.is_terminal else nullcontext():
            loaded = load.load(sources, full=fmt == "csv")
        built = tables.build(loaded.winners)
        if fmt == "csv":
            text = render.to_csv(loaded, built)
        else:
            text = render.to_html(loaded, built, _plots(built, err))
    for bad in loaded.bad[:MAX_WARNINGS]:
        typer.echo(f"mxbench: warning: {bad.path}:{bad.lineno}: {bad.reason} (skipped)", err=True)
    if len(loaded.bad) > MAX_WARNINGS:
        more = len(loaded.bad) - MAX_WARNINGS
        typer.echo(f"mxbench: warning: {more} more unreadable line(s) skipped", err=True)
    if not loaded.cells:
        where = ", ".join(str(s) for s in sources)
        raise MxbenchError(f"no result records found in {where}")
    _write(text, output)


def _plots(built: list[Table], err: Console) -> dict[int, str]:
    from rich.progress import Progress

    from mxbench.report.plot import png_base64

    plots: dict[int, str] = {}
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("plotting", total=len(built))
        for i, t in enumerate(built):
            data = png_base64(t)
            if data:
                plots[i] = data
            progress.advance(task)
    return plots


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--output {output}: {exc.strerror}") from None
    typer.echo(f"mxbench: report written to {output}", err=True)
