"""``mxbench run``: every cell of the matrix on every host, one record per attempt."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mxbench.errors import MxbenchError, UsageError

if TYPE_CHECKING:
    from mxbench.matrix.document import Override
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
    False, "--fast", help="measure: quick: short windows, no profile or one-step check (the "
    "default model: a first answer in under a minute).", rich_help_panel=_WHAT,
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

    from mxbench import session

    given = _overrides([model, policy, batch_size, backend], param, set_, fast, rigorous)
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
