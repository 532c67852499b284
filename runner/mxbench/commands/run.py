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
    from mxbench.matrix.document import Override
    from mxbench.matrix.file import Matrix
    from mxbench.orchestrate import RunSummary
    from mxbench.records.store import ResultStore


# The options of `mxbench run` (typer reads each from its parameter's default).
_MATRIX = typer.Option(
    None,
    "--matrix",
    "-m",
    help="Matrix file (schema v1). Default: the embedded default matrix, as for every "
    "command (this machine's CPU, small images, a few minutes on 2 cores; `mxbench init` "
    "writes one to edit). The options below go over it.",
    show_default=False,
)
_WHAT = "What to measure (over the matrix)"
_MODEL = typer.Option(
    [], "--model", help="Models (comma-separated): resnet50, gpt, nets/m.py:build, ...",
    show_default=False, rich_help_panel=_WHAT,
)  # fmt: skip
_POLICY = typer.Option(
    [], "--policy", help="Policies: float32,mixed_float16,mixed_bfloat16,float16.",
    show_default=False, rich_help_panel=_WHAT,
)  # fmt: skip
_BATCH = typer.Option(
    [], "--batch-size", help="Batch sizes: 32,64 (or max: the largest that fits).",
    show_default=False, rich_help_panel=_WHAT,
)  # fmt: skip
_BACKEND = typer.Option(
    [], "--backend", help="Keras backends: tensorflow,jax,torch.", show_default=False,
    rich_help_panel=_WHAT,
)  # fmt: skip
_PARAM = typer.Option(
    [], "--param", "-P", help="NAME=V1,V2: sweep any parameter (image_size=64,128; "
    "docs/matrix.md lists them).", show_default=False, rich_help_panel=_WHAT,
)  # fmt: skip
_SET = typer.Option(
    [], "--set", help="KEY=VALUE, a YAML value at a dotted key: steps=50, "
    "benchmark.image_size=32, hosts.0.memory_limit=2g.", show_default=False,
    rich_help_panel=_WHAT,
)  # fmt: skip
_FAST = typer.Option(
    False, "--fast", help="measure: quick: a first answer in about a minute (short windows, "
    "no profile or one-step check).", rich_help_panel=_WHAT,
)  # fmt: skip
_RIGOROUS = typer.Option(
    False, "--rigorous", help="measure: rigorous: longer windows, up to 10 processes, "
    "until the speedup is known within ±2%.", rich_help_panel=_WHAT,
)  # fmt: skip

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
    model: list[str] = _MODEL,
    policy: list[str] = _POLICY,
    batch_size: list[str] = _BATCH,
    backend: list[str] = _BACKEND,
    param: list[str] = _PARAM,
    set_: list[str] = _SET,
    fast: bool = _FAST,
    rigorous: bool = _RIGOROUS,
) -> None:
    """Measure every cell (host x image x parameters) of a matrix.

    Each cell runs in a fresh process (or container, or Slurm job) and leaves one JSON
    record in `RESULTS/<host>.jsonl` the moment it finishes; Ctrl-C keeps what is done and
    prints the command that resumes. Hosts run in parallel, except hosts of one machine
    (they would slow each other and mix their timings); records carry started_at and
    finished_at so anyone can check what overlapped. Exit code 0 when every cell ended ok / oom /
    unsupported, 1 when any errored or timed out, 2 for a bad matrix or bad options, 130
    when interrupted (Ctrl-C or SIGTERM).

    How to measure is `measure:` (a preset: quick, default, rigorous; or its knobs): by
    default float32 and each policy share a process and take turns in short windows, 2
    processes per comparison to start and one more while its verdict is unclear; the run
    ends with the verdicts (docs/measuring.md).

    Examples:

    ```
    mxbench run                                      # embedded local default
    mxbench run --model resnet50 --policy float32,mixed_bfloat16 --batch-size 32,64
    mxbench run --fast --set benchmark.image_size=32 # a quick look, smaller images
    mxbench run -m matrix.yaml --dry-run             # what would run
    mxbench run -m matrix.yaml --host v100 --resume  # one host, skip done cells
    ```
    """

    from mxbench.cells import trained
    from mxbench.cells.cell import expand, searches
    from mxbench.matrix.file import DEFAULT_NAME, load_matrix
    from mxbench.records.store import ResultStore

    given = _overrides([model, policy, batch_size, backend], param, set_, fast, rigorous)
    flags = [a for o in given for a in o[1]]
    mx = load_matrix(matrix, [o[0] for o in given])
    for note in mx.notes:
        print(f"mxbench: note: {note}", file=sys.stderr)
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
        where = f"{matrix or DEFAULT_NAME}" + (f" with {shlex.join(flags)}" if flags else "")
        summary = _measure(mx, cells, hunts, store, where, resume, dry_run, max_parallel)
    if summary is None:
        return
    again = [*_resume_command(matrix, results, host, max_parallel, label), *flags]
    _finish(summary, results, label, {c.key for c in cells}, again)


def _finish(
    summary: RunSummary, results: Path, label: str | None, keys: set[str], again: list[str]
) -> None:
    """How the run ended, on stderr, and the answers on stdout; the exit code."""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items())) or "nothing"
    if summary.interrupted:
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
    _print_answers(results, label, keys | summary.added)
    if summary.failed:
        raise MxbenchError(f"{summary.failed} cell(s) failed (error or timeout); see {results}/")


_AXES = (("--model", "model"), ("--policy", "policy"), ("--batch-size", "batch_size"),
         ("--backend", "backend"))  # fmt: skip


def _overrides(
    axes: list[list[str]], param: list[str], set_: list[str], fast: bool, rigorous: bool
) -> list[tuple[Override, list[str]]]:
    """The options over the matrix, each with its command-line words (for the resume line):
    the measure preset first, then the axes, then --set in the order given."""
    from mxbench.matrix import document

    if fast and rigorous:
        raise UsageError("--fast and --rigorous: choose one (measure: quick or rigorous)")
    out: list[tuple[Override, list[str]]] = []
    if fast or rigorous:
        flag = "--fast" if fast else "--rigorous"
        out.append((document.preset("quick" if fast else "rigorous", flag), [flag]))
    for (flag, name), given in zip(_AXES, axes, strict=True):
        if given:
            text = ",".join(given)
            out.append((document.axis_from_text(name, text, f"{flag} {text}"), [flag, text]))
    for item in param:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"-P {item[:60]!r}: expected NAME=V1,V2 (-P image_size=64,128)")
        out.append((document.axis_from_text(name.strip(), text, f"-P {item}"), ["-P", item]))
    for item in set_:
        key, sep, text = item.partition("=")
        if not sep:
            raise UsageError(f"--set {item[:60]!r}: expected KEY=VALUE (--set steps=50)")
        origin = f"--set {item}"
        value = document.parse_value(text, origin)
        out.append((document.setting(key.strip(), value, origin), ["--set", item]))
    return out


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
    where: str,
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
