"""``mxbench doctor``: is every host of the matrix ready, and if not, what fixes it."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mxbench.commands import options

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell
    from mxbench.engines import Check, Engine

DISK_FAIL = 256 * 2**20  # results need little, but a full disk loses records
DISK_WARN = 2 * 2**30
MARK = {"ok": "ok", "fail": "FAIL", "warn": "warn", "skip": "-"}
STYLE = {"ok": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}
ROOFS_HELP = (
    "Also the pre-flight of this machine: per backend and 16-bit dtype, whether a fast path "
    "exists (ISA flags or Tensor Cores, the kernels a tiny probe ran) and the measured matmul "
    "ceiling against float32's; warns where there is none. Measures once (under a minute on "
    "a CPU), then reads the cache (`mxbench roofs`)."
)


def doctor(
    matrix: Path | None = typer.Option(
        None,
        "--matrix",
        "-m",
        help="Matrix file. Default: the embedded default matrix, as for every command.",
        show_default=False,
    ),
    host: list[str] = typer.Option(
        [], "--host", "-H", help="Check only this host (repeatable).", show_default=False
    ),
    results: Path = typer.Option(
        Path("results"), "--results", "-r", help="Where `mxbench run` will write (free disk)."
    ),
    noise: int = typer.Option(
        0,
        "--noise",
        help="Also measure each host's noise floor: this many A/A processes "
        "(float32 against itself, paired, at the matrix's first batch size), the floor at "
        "window, process and run level, saved under RESULTS/noise/ for `mxbench compare`.",
        show_default=False,
        min=0,
        max=50,
    ),
    roofs: bool = typer.Option(False, "--roofs", help=ROOFS_HELP),
    model: list[str] = options.MODEL,
    policy: list[str] = options.POLICY,
    batch_size: list[str] = options.BATCH,
    backend: list[str] = options.BACKEND,
    param: list[str] = options.PARAM,
    set_: list[str] = options.SET,
    fast: bool = options.FAST,
    rigorous: bool = options.RIGOROUS,
) -> None:
    """Check every host of a matrix in seconds, one line per check with the fix.

    Per host: reachable (Docker daemon, Slurm controller, the local interpreter); Docker's
    version; the NVIDIA runtime where GPUs are requested; the devices the bench would see
    (GPUs with memory, compute capability and driver, probed inside the host's image or
    with its interpreter, not assumed); each image present and current (its content-hash
    tag) or the `mxbench build` line that makes it; for Slurm, whether the controller would
    accept the job (`sbatch --test-only`: partition, GRES, account); free disk for results.
    Hosts are checked in parallel and nothing is measured. Exit code 0 when every host is
    ready, 1 when any check failed, 2 for a bad matrix.

    ```
    mxbench doctor -m matrix.yaml
    mxbench doctor -m matrix.yaml --host v100
    mxbench doctor --noise 3              # the local machine's noise floor, 3 A/A processes
    mxbench doctor --roofs                # does this machine have a bf16 / fp16 fast path?
    mxbench doctor --backend jax          # the default matrix on JAX (as mxbench run takes it)
    ```

    The options of `mxbench run` that say what to measure go over the matrix here too, so
    the doctor checks what that run would run. The pre-flight (`--roofs`) is of this
    machine, whatever the hosts' checks found.
    """
    from mxbench.cells.cell import expand, searches
    from mxbench.engines import engine_class
    from mxbench.matrix.file import load_matrix

    given = options.overrides([model, policy, batch_size, backend], param, set_, fast, rigorous)
    mx = load_matrix(matrix, [o[0] for o in given])
    for note in mx.notes:
        print(f"mxbench: note: {note}", file=sys.stderr)
    cells = expand(mx, host or None) + [s.template for s in searches(mx, host or None)]
    names = list(dict.fromkeys([*(host or []), *(h.name for h in mx.hosts if not host)]))
    engines = {n: engine_class(mx.host(n).engine_name)(mx.host(n), mx) for n in names}

    ready = _checked(engines, cells, results)
    if roofs:  # this machine's, whatever a host's checks found; --backend: those only
        _preflight(sorted({c.params.backend for c in cells}) if backend else None)
    if not ready:
        raise typer.Exit(1)
    if noise:
        for name in names:
            _noise_floor(engines[name], [c for c in cells if c.host == name], noise, results)


def _checked(engines: dict[str, Engine], cells: list[Cell], results: Path) -> bool:
    """Every host's checks and the free disk, shown with a summary line; whether all passed."""
    t0 = time.monotonic()
    checked = _check_all(engines, cells)
    disk = _disk(results)
    wall = time.monotonic() - t0

    failed = _show(checked, cells, disk)
    summary = f"{len(engines) - len(failed)}/{len(engines)} host(s) ready, checked in {wall:.1f} s"
    if failed:
        summary += f"; not ready: {', '.join(failed)}"
    if disk.state == "fail":
        summary += "; not enough disk for results"
    typer.echo(summary, err=True)
    return not failed and disk.state != "fail"


def _preflight(backends: list[str] | None) -> None:
    from mxbench.commands.roofs import preflight

    preflight(backends)


def _show(
    checked: dict[str, tuple[list[Check], float]], cells: list[Cell], disk: Check
) -> list[str]:
    """The checks as one table (host, check, state, detail, fix); the hosts that failed."""
    from rich.console import Console
    from rich.table import Table

    from mxbench.progress import plain

    console = Console()
    if not console.is_terminal:  # logs and pipes: no wrapping of paths and commands
        console = Console(width=200)
    table = Table(title="mxbench doctor", title_justify="left", show_lines=False)
    for col in ("host", "check", "", "detail", "fix"):
        table.add_column(col, overflow="fold")
    failed = []
    for name, (checks, secs) in checked.items():
        for i, c in enumerate(checks):
            label = f"{name} ({secs:.1f} s)" if i == 0 else ""
            # plain Text, not markup: a fix such as pip's '...[tf]' is shown as it is
            shown = (label, c.name, MARK[c.state], c.detail, c.fix)
            table.add_row(*map(plain, shown), style=STYLE[c.state])
        if any(c.state == "fail" for c in checks):
            failed.append(name)
    for model, source in sorted(
        {(c.params.model, c.model_source) for c in cells if c.model_source}
    ):
        detail = f"{model}: found, function defined (source {source}); not run here"
        table.add_row(
            *map(plain, ("(model)", "user model", MARK["ok"], detail, "")), style=STYLE["ok"]
        )
    table.add_row(
        *map(plain, ("(results)", disk.name, MARK[disk.state], disk.detail, disk.fix)),
        style=STYLE[disk.state],
    )
    console.print(table)
    return failed


def _noise_floor(engine: Engine, cells: Sequence[Cell], processes: int, results: Path) -> None:
    """``processes`` A/A processes of the host's first timing cell (float32 against itself in
    the paired design), one after another through its engine; the floor printed and saved."""
    from dataclasses import replace

    import msgspec

    from mxbench.engines import to_record
    from mxbench.matrix.params import BASELINE
    from mxbench.records.codec import bench_records
    from mxbench.stats import noise

    timing = [c for c in cells if c.search is None and not c.params.training_run]
    if not timing:
        typer.echo(f"{engine.host.name}: no timing cell to measure a noise floor with", err=True)
        return
    first = timing[0]
    params = msgspec.structs.replace(
        first.params, policy=BASELINE, pairing="paired", steps_per_execution=1, repeat=1
    )
    base = replace(first, params=params)
    cell = replace(base, partners=(base,))  # the same policy as its own partner: A/A
    try:
        engine.prepare([cell])  # what running a cell needs (images resolved, caches, ...)
    except Exception as exc:
        typer.echo(f"{engine.host.name}: cannot measure a noise floor: {exc}", err=True)
        return
    found = []
    for i in range(processes):
        typer.echo(f"{engine.host.name}: A/A process {i + 1}/{processes}...", err=True)
        ((_, outcome),) = list(engine.run([cell]))
        recs = bench_records(outcome.stdout)
        if len(recs) < 2:
            typer.echo(f"  failed: {to_record(cell, outcome).error}", err=True)
            continue
        found.append(recs[-1])  # the second arm: its ratios against the first
    floor = noise.floor(engine.host.name, found)
    where = noise.save(results, floor)
    typer.echo(noise.text(floor) + f" (saved to {where})")


def _check_all(
    engines: dict[str, Engine], cells: Sequence[Cell]
) -> dict[str, tuple[list[Check], float]]:
    """Every host's checks, the hosts in parallel, each with the seconds it took."""

    def check(name: str) -> tuple[list[Check], float]:
        t0 = time.monotonic()
        found = list(_guarded(engines[name], [c for c in cells if c.host == name]))
        return found, time.monotonic() - t0

    with ThreadPoolExecutor(max_workers=max(1, len(engines))) as pool:
        return dict(zip(engines, pool.map(check, engines), strict=True))


def _guarded(engine: Engine, cells: Sequence[Cell]) -> Iterator[Check]:
    """The engine's checks; an unexpected error is itself a failed check, not a traceback."""
    from mxbench.engines import Check

    any_check = False
    try:
        for check in engine.doctor(cells):
            any_check = True
            yield check
    except Exception as exc:
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        yield Check("doctor", "fail", f"checking stopped: {reason}")
        return
    if not any_check:
        yield Check("engine", "skip", f"no checks for engine {engine.name}")


def _disk(results: Path) -> Check:
    from mxbench.engines import Check

    where = results.resolve()
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    detail = f"{free / 2**30:.1f} GiB free at {where}"
    if free < DISK_FAIL:
        return Check("free disk", "fail", detail, "free space or pass --results elsewhere")
    if free < DISK_WARN:
        return Check("free disk", "warn", detail, "a long run's records and logs need more")
    return Check("free disk", "ok", detail)
