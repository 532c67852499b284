"""A run of a matrix: its cells planned (``--dry-run``) or measured under the results
directory's lock, with Ctrl-C (or SIGINT / SIGTERM) ending it in any phase; what
``mxbench run`` and :func:`mxbench.run` both call. The command line adds only its words
(flags in, the resume line and the exit code out)."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mxbench.errors import UsageError

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell, Search
    from mxbench.matrix.document import Override
    from mxbench.matrix.file import Matrix
    from mxbench.orchestrate import RunSummary
    from mxbench.records.store import ResultStore


@dataclass
class Outcome:
    """What a run did: its summary (None: only planned, or nothing to run), the keys of the
    matrix's cells and of the processes ``repeats: auto`` added."""

    summary: RunSummary | None
    keys: set[str] = field(default_factory=set)


LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]{0,99}")


def run(
    matrix: Path | None,
    overrides: Iterable[Override],
    results: Path,
    *,
    resume: bool = False,
    dry_run: bool = False,
    hosts: list[str] | None = None,
    max_parallel: int | None = None,
    label: str | None = None,
    said: Sequence[str] = (),
) -> Outcome:
    """Load the matrix (``None``: the embedded default) with ``overrides`` over it, expand
    its cells on ``hosts`` (None: every host) and plan or measure them into ``results``;
    ``said``: the overrides as the caller gave them (flags), for the progress lines. A
    Ctrl-C ends it with ``summary.interrupted``; bad input raises
    :class:`~mxbench.errors.UsageError`."""
    from mxbench.cells import trained
    from mxbench.cells.cell import expand, searches
    from mxbench.matrix.file import DEFAULT_NAME, load_matrix
    from mxbench.orchestrate import RunSummary
    from mxbench.records.store import ResultStore

    mx = load_matrix(matrix, overrides)
    for note in mx.notes:
        print(f"mxbench: note: {note}", file=sys.stderr)
    if label is not None and not LABEL.fullmatch(label):
        raise UsageError(
            f"--label {label[:40]!r}: use up to 100 letters, digits and . _ : + @ - "
            "(starting with a letter or digit)"
        )
    store = ResultStore(results, label)  # training runs' weights for serving cells: trained.py
    cells = trained.link(expand(mx, hosts or None), results, store.latest_by_cell)
    hunts = searches(mx, hosts or None)
    summary: RunSummary | None = RunSummary(interrupted=True)  # unless _measure returns
    with contextlib.suppress(KeyboardInterrupt), guarded(store, cells, hunts, dry_run):
        where = f"{matrix or DEFAULT_NAME}" + (f" with {shlex.join(said)}" if said else "")
        summary = _measure(mx, cells, hunts, store, where, resume, dry_run, max_parallel)
    keys = {c.key for c in cells} | (summary.added if summary is not None else set())
    return Outcome(summary, keys)


@contextlib.contextmanager
def guarded(
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


def _measure(
    mx: Matrix,
    cells: list[Cell],
    hunts: list[Search],
    store: ResultStore,
    where: str,
    resume: bool,
    dry_run: bool,
    max_parallel: int | None,
) -> RunSummary | None:
    """The plan (``--dry-run``) or the run (under :func:`guarded`); None when nothing ran."""
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
            print_plan(cells)
        if skipped:
            print(f"{skipped} cell(s) already done in {results}/, skipped (--resume)")
        for hunt in hunts:
            print(f"batch-size search: {hunt.label()}: {hunt.config.describe()}")
        if auto is not None and plan is not None:
            print(
                f"repeats: auto: {auto.describe()}. The plan above is the first round; "
                f"{len(plan.groups)} comparison group(s) may grow to {auto.max} processes "
                f"per policy ({sum(len(g.policies) for g in plan.groups) * auto.max} "
                "processes at most; settings: measure.auto_repeats)"
            )
        return None
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


def verdicts(results: Path, label: str | None, keys: set[str]) -> list[str]:
    """The verdicts of these cells (a run's, and those --resume kept), one line per
    comparison with float32, and how many comparisons were judged: the answer first."""
    from mxbench.report import load, tables
    from mxbench.report.sections import answers, inference

    loaded = load.load([results], label=label)
    ours = [r for r in loaded.winners if r.cell in keys]
    built = tables.build(ours)
    said = answers.lines(built) + inference.lines(ours)
    count = answers.judged(built) if said else None
    return said + ([count] if count else [])


def print_plan(cells: list[Cell]) -> None:
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
