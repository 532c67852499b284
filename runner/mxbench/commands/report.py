"""`mxbench report`: merge result records from any hosts into the experiment's tables."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from mxbench.errors import MxbenchError, UsageError

# Set by the command line (mxbench.cli.main), never for a library caller: the process ends
# as soon as every output is written (:func:`_exit_now`).
EXIT_WHEN_DONE = False


def report(
    results: list[Path] = typer.Option(
        None,
        "--results",
        "-r",
        help="A folder (every *.jsonl file in the tree below it) or a JSONL file; "
        "repeatable. Default: ./results.",
    ),
    markdown: bool = typer.Option(
        False,
        "--markdown",
        help="GitHub-style markdown (the default when stdout is not a terminal).",
    ),
    csv: bool = typer.Option(
        False,
        "--csv",
        help="Tidy CSV: one row per cell; text from records (names, labels, the error's "
        "last line) cut to 300 characters, as in every format.",
    ),
    html: bool = typer.Option(
        False,
        "--html",
        help="One self-contained HTML page: the answer grids, tables, plots, diagnosis.",
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
    output: list[Path] = typer.Option(
        None,
        "--output",
        "-o",
        help="Write here instead of stdout; repeatable: each file's suffix names its format "
        "(.md, .html, .json, .csv, .txt), so one call writes several.",
    ),
) -> None:
    """The answer first: per policy, the speedup over float32 by device and batch size with
    its verdict; then tables per (host, device, image, setup): ms/step per policy and batch
    size, the speedup with its 95% interval, images/s, device annotations, failures and a
    diagnosis.

    Formats: --markdown, --csv, --html, --json (one, to stdout or to one --output); or
    repeated --output files, each in the format its suffix names. With neither, a terminal
    gets a coloured rendering and a pipe gets markdown. Several attempts of a cell: the
    latest ok wins, else the latest attempt's status shows (OOM, error, timeout,
    unsupported), and the report says how many older attempts it hides. A folder is read
    with every result file in the tree below it. Unreadable lines and files are skipped with
    a `file:line: reason` warning. Exit 0 ok, 1 no records found, 2 bad usage (e.g. a
    --results path that does not exist).
    """
    from mxbench.report import fanout

    fanout.prepare()  # before numpy is imported (and starts its threads)
    formats = (("markdown", markdown), ("csv", csv), ("html", html), ("json", json_))
    chosen = [name for name, on in formats if on]
    targets = _targets(chosen, list(output or []))
    sources = list(results) if results else [Path("results")]
    if not results and not Path("results").exists():
        raise UsageError(
            "no ./results directory here: measure first (mxbench run), or name result "
            "directories or files with --results"
        )

    from mxbench.report import load

    with load.collector_paused():
        loaded = load.load(sources, label=label)
        _not_read(targets, loaded.files)
        _report(loaded, sources, label, targets)


def _not_read(targets: list[tuple[str, Path | None]], files: list[Path]) -> None:
    """No output may replace a results file this report reads: its records would be lost.
    Only files that exist already are looked for, by name first (a report reads up to
    100,000 files)."""
    existing = [path for _, path in targets if path is not None and path.exists()]
    if not existing:
        return
    names = {n for path in existing for n in (path.name, path.resolve().name)}
    read = [f for f in files if f.name in names]
    for path in existing:
        for f in read:
            try:
                same = os.path.samefile(path, f)
            except OSError:
                continue
            if same:
                raise UsageError(
                    f"--output {path}: is a results file this report reads ({f}); nothing written"
                )


def _report(
    loaded: Any, sources: list[Path], label: str | None, targets: list[tuple[str, Path | None]]
) -> None:
    """Warnings, then every output asked for, from one document."""
    from mxbench.records.store import bad_line_warnings
    from mxbench.report import document, tables

    for warning in bad_line_warnings(loaded.bad):
        typer.echo(warning, err=True)
    if not loaded.winners and label is not None and loaded.read:
        known = ", ".join(sorted(repr(x) for x in loaded.labels if x is not None)) or "none"
        raise MxbenchError(
            f"label {label!r} matches none of the {loaded.read} records read "
            f"(their labels: {known})"
        )
    if not loaded.winners:
        where = ", ".join(str(s) for s in sources)
        which = f" with label {label!r}" if label else ""
        raise MxbenchError(
            f"no result records{which} found in {where}: run `mxbench run` first (or point "
            "--results at result files or the folders above them)"
        )
    doc = document.build(loaded, tables.build(loaded.winners))
    written: list[Path] = []
    for fmt, path in targets:
        if fmt == "terminal" and path is None:
            from rich.console import Console

            from mxbench.report.render import terminal

            terminal.show(doc, Console())
            continue
        _write(_html(doc).encode() if fmt == "html" else document.encode(doc, fmt), path, written)
    if EXIT_WHEN_DONE:
        _exit_now()


def _exit_now() -> None:
    """End the process here, its output flushed, without freeing the report's objects one
    by one: for 100,000 records that was 0.6 s of a 6 s report (mypy ends the same way).
    Nothing is left to clean up: the worker processes have ended, the files are written
    whole (:func:`mxbench.records.store.write_atomic`). A stream that cannot be flushed (a closed
    pipe) leaves it to the usual exit, which says so."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(0)


def _targets(chosen: list[str], outputs: list[Path]) -> list[tuple[str, Path | None]]:
    """(format, file or None for stdout) for each output asked for."""
    from mxbench.report.document import FORMATS, format_of

    seen: set[Path] = set()
    for path in outputs:
        if path.resolve() in seen:
            raise UsageError(f"--output {path}: named twice (nothing written)")
        seen.add(path.resolve())
        if path.is_dir():
            raise UsageError(f"--output {path}: is a directory")
        folder = path.parent
        if not folder.is_dir():
            raise UsageError(f"--output {path}: no folder {folder} (nothing written)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"--output {path}: cannot write in {folder} (nothing written)")
    if len(outputs) > 1 and chosen:
        raise UsageError(
            "with several --output files each file's suffix names its format: leave out "
            + " ".join("--" + c for c in chosen)
        )
    if len(chosen) > 1:
        raise UsageError(f"choose one output format, not {' and '.join('--' + c for c in chosen)}")
    if chosen:
        return [(chosen[0], outputs[0] if outputs else None)]
    if not outputs:
        return [("terminal" if sys.stdout.isatty() else "markdown", None)]
    out: list[tuple[str, Path | None]] = []
    for path in outputs:
        fmt = format_of(path.suffix)
        if fmt is None:
            known = ", ".join(s for _, suffixes in FORMATS.values() for s in suffixes)
            raise UsageError(
                f"--output {path}: cannot tell the format from its suffix ({known}; or name "
                "one format with --markdown, --csv, --html or --json)"
            )
        out.append((fmt, path))
    return out


def _html(doc: Any) -> str:
    from rich.console import Console
    from rich.progress import Progress

    from mxbench.report.render import html

    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("tables and plots", total=len(doc.speed))
        return html.render(doc, on_table=lambda: progress.advance(task))


def _write(data: bytes, output: Path | None, written: list[Path]) -> None:
    """One output (UTF-8), whole or not at all; ``written``: the files written before it (a
    failure names them)."""
    if output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")
        return
    from mxbench.records.store import write_atomic

    try:
        write_atomic(output, data, durable=False)  # made again from the records
    except OSError as exc:
        done = f"not written; written: {', '.join(map(str, written))}" if written else ""
        raise UsageError(
            f"--output {output}: {exc.strerror} ({done or 'nothing written'})"
        ) from None
    written.append(output)
    typer.echo(f"mxbench: report written to {output}", err=True)
