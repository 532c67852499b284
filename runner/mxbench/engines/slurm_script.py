"""The batch script of a Slurm submission: sbatch options and the bench's argv per cell.

Pure functions of the host entry and the cells (no cluster needed), so that what mxbench
would submit can be read, tested and resubmitted by hand: the script carries its options as
``#SBATCH`` lines and runs cell ``$SLURM_ARRAY_TASK_ID``, then leaves its exit code in a
``.rc`` file next to the task's output.
"""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from mxbench.cells import Cell
from mxbench.matrix import SlurmHost


def bench_command(host: SlurmHost, cell: Cell) -> list[str]:
    """The argv that runs one cell on a node: the shared interpreter or a container."""
    args = ["bench", *cell.bench_args()]
    image = host.container_image
    if image is None:
        return [host.python or sys.executable, "-m", "mxbench", *args]
    if runtime(host) == "pyxis":
        return ["srun", "--ntasks=1", f"--container-image={image}", "mxbench", *args]
    gpu = bool(host.gres and "gpu" in host.gres) or any(
        o.startswith(("--gpus", "--gres=gpu", "-G")) for o in host.sbatch_options
    )
    return ["apptainer", "exec", *(["--nv"] if gpu else []), image, "mxbench", *args]


def runtime(host: SlurmHost) -> str:
    """The container runtime: ``container_runtime``, else pyxis (``srun --container-image``)."""
    return host.container_runtime or "pyxis"


def time_limit(host: SlurmHost, cells: Sequence[Cell]) -> str:
    """``--time``: the host's ``time_limit``, else the longest cell timeout in minutes."""
    if host.time_limit:
        return host.time_limit
    return str(max(1, math.ceil(max(c.timeout_s for c in cells) / 60)))


def sbatch_directives(
    host: SlurmHost, cells: Sequence[Cell], run_dir: Path, prefix: str, array: bool
) -> list[str]:
    """The sbatch options of one submission (written as ``#SBATCH`` lines)."""
    task = "%a" if array else "0"
    opts = [
        f"--job-name=mxbench-{host.name}",
        f"--output={run_dir}/{prefix}-{task}.out",
        f"--error={run_dir}/{prefix}-{task}.err",
        f"--time={time_limit(host, cells)}",
        "--ntasks=1",
    ]
    if array:
        opts.append(f"--array=0-{len(cells) - 1}")
    for key in ("partition", "gres", "constraint", "account"):
        value = getattr(host, key)
        if value:
            opts.append(f"--{key}={value}")
    for extra in host.sbatch_options:
        opts.extend(shlex.split(extra))
    return opts


def job_script(
    host: SlurmHost, cells: Sequence[Cell], run_dir: Path, prefix: str, array: bool
) -> str:
    """A batch script that runs cell ``$SLURM_ARRAY_TASK_ID`` and leaves its exit code."""
    lines = ["#!/bin/bash"]
    lines += [
        f"#SBATCH {shlex.quote(o)}" for o in sbatch_directives(host, cells, run_dir, prefix, array)
    ]
    lines += [
        "# Written by mxbench: one cell per array task; stdout carries the result record.",
        "export PYTHONUNBUFFERED=1",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(host.env.items())]
    task = '"${SLURM_ARRAY_TASK_ID:-0}"' if array else "0"
    lines.append(f"task={task}")
    lines.append('case "$task" in')
    for i, cell in enumerate(cells):
        lines.append(f"  {i}) set -- {shlex.join(bench_command(host, cell))} ;;")
    lines.append('  *) echo "mxbench: no cell for task $task" >&2; exit 2 ;;')
    lines.append("esac")
    lines.append('"$@"')
    lines.append("rc=$?")
    lines.append(f'echo "$rc" > {shlex.quote(str(run_dir))}/{prefix}-"$task".rc')
    lines.append('exit "$rc"')
    return "\n".join(lines) + "\n"
