"""``mxbench run``: every cell of the matrix on every host, one record per attempt."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mxbench.errors import MxbenchError, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mxbench.cells.cell import Cell, Search
    from mxbench.matrix.file import Matrix
    from mxbench.orchestrate import RunSummary
    from mxbench.records.store import ResultStore


# The options of `mxbench run` (typer reads each from its parameter's default).
_MATRIX = typer.Option(
    None,
    "--matrix",
    "-m",
    help="Matrix file (schema v1). Default: the embedded local matrix "
    "(this machine's CPU, small image size, a few minutes on 2 cores).",
    show_default=False,
)

_RESULTS = typer.Option(
    Path("results"),
    "--results",
    "-r",
    help="Directory of JSONL result files (one per host); records are appended.",
)

_RESUME = typer.Option(
    False, "--resume", help="Skip cells whose latest record is ok (or oom: a final answer)."
)

_DRY_RUN = typer.Option(
    False,
    "--dry-run",
    "-n",
    help="Print the plan (one row per cell) and exit; with --resume, only the cells "
    "that would run.",
)

_HOST = typer.Option(
    [], "--host", "-H", help="Run only this host (repeatable).", show_default=False
)

_MAX_PARALLEL = typer.Option(
    None,
    "--max-parallel",
    "-j",
    min=1,
    help="Run at most N hosts at once (default: every machine at once). Hosts of one "
    "machine (the host's `machine:`, else: local, the Docker daemon, the Slurm cluster) "
    "always run one at a time.",
    show_default=False,
)

_LABEL = typer.Option(
    None,
    "--label",
    "-l",
    help="Name this run (e.g. driver-550): stored in every record, selectable in "
    "`mxbench report --label` and `mxbench compare`. With --resume, only cells done "
    "under this label are skipped.",
    show_default=False,
)


def run(
    matrix: Path | None = _MATRIX,
    results: Path = _RESULTS,
    resume: bool = _RESUME,
    dry_run: bool = _DRY_RUN,
    host: list[str] = _HOST,
    max_parallel: int | None = _MAX_PARALLEL,
    label: str | None = _LABEL,
) -> None:
    """Measure every cell (host x image x parameters) of a matrix.

    Each cell runs in a fresh process (or container, or Slurm job) and leaves one JSON
    record in `RESULTS/<host>.jsonl` the moment it finishes; Ctrl-C keeps what is done and
    prints the command that resumes. Hosts run in parallel, except hosts of one machine
    (they would slow each other and mix their timings); records carry started_at and
    finished_at so anyone can check what overlapped. Exit code 0 when every cell ended ok / oom /
    unsupported, 1 when any errored or timed out, 2 for a bad matrix or bad options, 130
    when interrupted (Ctrl-C or SIGTERM).

    Each comparison is paired by default (`benchmark.pairing: paired`): float32 and the
    policy share each process and take turns in short windows, so a busy machine's drift
    falls on both. With `benchmark.repeats: auto` (the default) a comparison starts with 2
    processes and gets one more while its verdict is not clear at 99% (at 95% for a gross
    difference, 2x or more) and the budget lasts
    (settings: `benchmark.auto_repeats`); the run ends with where each comparison stopped
    and why, the verdicts, and how much of the run's time was timed steps.

    Examples:

    ```
    mxbench run                                      # embedded local default
    mxbench run -m matrix.yaml --dry-run             # what would run
    mxbench run -m matrix.yaml --host v100 --resume  # one host, skip done cells
    ```
    """

    from mxbench.cells import trained
    from mxbench.cells.cell import expand, searches
    from mxbench.matrix.file import default_matrix_path, load_matrix
    from mxbench.records.store import ResultStore

    matrix_path = matrix or default_matrix_path()
    mx = load_matrix(matrix_path)
    store = ResultStore(results, label)  # training runs' weights for serving cells: trained.py
    cells = trained.link(expand(mx, host or None), results, store.latest_by_cell)
    hunts = searches(mx, host or None)

    if label is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:+@-]{0,99}", label):
        raise UsageError(
            f"--label {label[:40]!r}: use up to 100 letters, digits and . _ : + @ - "
            "(starting with a letter or digit)"
        )
    from mxbench.orchestrate import RunSummary

    summary: RunSummary | None = RunSummary(interrupted=True)  # unless _measure returns
    with contextlib.suppress(KeyboardInterrupt), _guarded(store, cells, hunts, dry_run):
        summary = _measure(mx, cells, hunts, store, matrix, matrix_path, resume, dry_run,
                           max_parallel)  # fmt: skip
    if summary is None:
        return
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items())) or "nothing"
    if summary.interrupted:
        again = _resume_command(matrix, results, host, max_parallel, label)
        print(
            f"\nmxbench: interrupted. {summary.done} finished cell(s) are saved in "
            f"{results}/ ({counts}).\nResume with: {shlex.join(again)}",
            file=sys.stderr,
        )
        raise typer.Exit(130)
    from mxbench.report.sections.answers import time_to_answer

    for note in summary.notes:
        print(note, file=sys.stderr)
    spent = time_to_answer(summary.measured)
    if spent:
        print(f"mxbench: {spent}; the run took {summary.wall_s:.0f} s", file=sys.stderr)
    print(f"mxbench: done: {counts}. Report: mxbench report --results {results}", file=sys.stderr)
    _print_answers(results, label, {c.key for c in cells} | summary.added)
    if summary.failed:
        raise MxbenchError(f"{summary.failed} cell(s) failed (error or timeout); see {results}/")


@contextlib.contextmanager
def _guarded(
    store: ResultStore, cells: list[Cell], hunts: list[Search], dry_run: bool
) -> Iterator[None]:
    """The run under the results directory's lock (one run at a time per directory, exit 2
    if another holds it), where Ctrl-C (or SIGINT/SIGTERM from a script) raises
    KeyboardInterrupt in any phase, even where the run was started with SIGINT ignored."""
    from mxbench.orchestrate import stop_signals

    with stop_signals(), contextlib.ExitStack() as held:
        if not dry_run:
            store.check_writable({c.host for c in cells} | {h.template.host for h in hunts})
            held.enter_context(store.lock())
        yield


def _resume_command(
    matrix: Path | None,
    results: Path,
    host: list[str],
    max_parallel: int | None,
    label: str | None,
) -> list[str]:
    """The command that resumes an interrupted run with its options."""
    again = ["mxbench", "run"]
    if matrix is not None:
        again += ["--matrix", str(matrix)]
    if str(results) != "results":
        again += ["--results", str(results)]
    for h in host:
        again += ["--host", h]
    if max_parallel is not None:
        again += ["--max-parallel", str(max_parallel)]
    if label is not None:
        again += ["--label", label]
    again.append("--resume")
    return again


def _measure(
    mx: Matrix,
    cells: list[Cell],
    hunts: list[Search],
    store: ResultStore,
    matrix: Path | None,
    matrix_path: Path,
    resume: bool,
    dry_run: bool,
    max_parallel: int | None,
) -> RunSummary | None:
    """The plan (``--dry-run``) or the run (under :func:`_guarded`); None when nothing ran."""
    from mxbench.cells import rounds
    from mxbench.cells.cell import pair_up, to_run
    from mxbench.orchestrate import run_cells
    from mxbench.progress import CellProgress
    from mxbench.records.record import FINAL_STATUSES
    from mxbench.records.store import BadLine, bad_line_warnings

    results = store.root
    skipped = 0
    unread: list[BadLine] = []
    known = store.latest_by_cell(unread) if resume else {}
    for warning in bad_line_warnings(unread):
        print(warning, file=sys.stderr)
    auto = mx.benchmark.auto
    plan = None
    if auto is not None:  # the groups of every planned cell, done ones too (their records)
        limits = {h.name: h.limits() for h in mx.hosts}
        plan = rounds.plan(auto, cells, limits)
        rounds.known(plan, known)
    if resume:
        done = {k for k, r in known.items() if r.status in FINAL_STATUSES}
        left = to_run(cells, done)
        skipped = len(cells) - len(left)
        cells = left
    if dry_run:  # the plan of what would really run (with --resume: without the done cells)
        processes = pair_up(cells)
        paired = [p for p in processes if p.partners]
        if paired:
            print(
                f"pairing: paired: {sum(len(p.arms) for p in paired)} of the cells below are "
                f"measured in {len(paired)} process(es), float32 and its policies in "
                "interleaved windows, every batch size of a comparison in the same process; "
                f"{len(processes)} process(es) in all (docs/measuring.md)"
            )
        if cells or not hunts:
            _print_plan(cells)
        if skipped:
            print(f"{skipped} cell(s) already done in {results}/, skipped (--resume)")
        for hunt in hunts:
            print(f"batch-size search: {hunt.label()}: {hunt.config.describe()}")
        if auto is not None and plan is not None:
            print(
                f"repeats: auto: {auto.describe()}. The plan above is the first round; "
                f"{len(plan.groups)} comparison group(s) may grow to {auto.max} processes "
                f"per policy ({sum(len(g.policies) for g in plan.groups) * auto.max} "
                "processes at most; settings: benchmark.auto_repeats)"
            )
        return None
    where = "embedded default matrix" if matrix is None else str(matrix_path)
    print(
        f"mxbench: {len(cells)} cell(s)"
        + (f" and {len(hunts)} batch-size search(es)" if hunts else "")
        + f" to run from {where}"
        + (f" ({skipped} already done, skipped)" if skipped else "")
        + (", then more processes where repeats: auto needs them" if plan else "")
        + f"; results in {results}/",
        file=sys.stderr,
    )
    if not cells and not hunts and plan is None:
        return None

    with CellProgress(len(cells)) as progress:
        summary = run_cells(mx, cells, store, progress, hunts, known, max_parallel, plan)
    if plan is not None:
        summary.notes += [f"repeats: auto: {line}" for line in plan.summary()]
        summary.added = set(plan.by_key)
    return summary


def _print_answers(results: Path, label: str | None, keys: set[str]) -> None:
    """The verdicts of the matrix's cells (this run's, and those --resume kept), one line
    per comparison with float32, on stdout: the answer comes first."""
    from mxbench.report import load, tables
    from mxbench.report.sections import answers, inference

    loaded = load.load([results], label=label)
    ours = [r for r in loaded.winners if r.cell in keys]
    built = tables.build(ours)
    said = answers.lines(built) + inference.lines(ours)
    if said:
        count = answers.judged(built)
        print("\n" + "\n".join(said + ([count] if count else [])))


def _print_plan(cells: list[Cell]) -> None:
    """One row per cell: where it runs, the parameters that vary (policy and batch size
    always), its key; the parameters every cell shares in one line above."""
    from rich.console import Console
    from rich.table import Table

    from mxbench import models
    from mxbench.matrix import params

    def varies(f: params.Field) -> bool:
        return len({getattr(c.params, f.name) for c in cells}) > 1

    unused = models.unused_params({c.params.model for c in cells})
    shown = [f for f in params.fields() if f.spec.role == "slot" or varies(f)]
    same = [f for f in params.fields() if f not in shown and cells and f.name not in unused]
    console = Console(width=max(120, Console().width))
    if same:
        console.print(
            "same for every cell: "
            + " · ".join(
                f"{f.name} {getattr(cells[0].params, f.name)}"
                for f in same
                if getattr(cells[0].params, f.name) is not None
            ),
            highlight=False,
            markup=False,
        )
    table = Table(title=f"mxbench plan: {len(cells)} cell(s)", title_justify="left")
    for col in ("host", "engine", "image"):
        table.add_column(col)
    for f in shown:
        table.add_column(f.spec.column or f.name, justify="right" if f.type is int else "left")
    table.add_column("key", no_wrap=True)
    for c in cells:
        values = [getattr(c.params, f.name) for f in shown]
        table.add_row(
            c.host, c.engine, c.image or "-", *("-" if v is None else str(v) for v in values), c.key
        )
    console.print(table)
    print(f"{len(cells)} cell(s)")
