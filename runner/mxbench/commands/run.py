"""``mxbench run``: every cell of the matrix on every host, one record per attempt."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mxbench.commands import options
from mxbench.errors import MxbenchError

if TYPE_CHECKING:
    from mxbench.orchestrate import RunSummary


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
    model: list[str] = options.MODEL,
    policy: list[str] = options.POLICY,
    batch_size: list[str] = options.BATCH,
    backend: list[str] = options.BACKEND,
    param: list[str] = options.PARAM,
    set_: list[str] = options.SET,
    fast: bool = options.FAST,
    rigorous: bool = options.RIGOROUS,
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

    from mxbench import session

    given = options.overrides([model, policy, batch_size, backend], param, set_, fast, rigorous)
    flags = [a for o in given for a in o[1]]
    done = session.run(matrix, [o[0] for o in given], results, resume=resume, dry_run=dry_run,
                       hosts=host, max_parallel=max_parallel, label=label, said=flags)  # fmt: skip
    if done.summary is None:
        return
    again = [*_resume_command(matrix, results, host, max_parallel, label), *flags]
    _finish(done.summary, results, label, done.keys, again)


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
    from mxbench.session import verdicts

    said = verdicts(results, label, keys)
    if said:
        print("\n" + "\n".join(said))
    if summary.failed:
        raise MxbenchError(f"{summary.failed} cell(s) failed (error or timeout); see {results}/")


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
