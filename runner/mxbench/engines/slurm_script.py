"""The batch script of a Slurm submission: sbatch options and the bench's argv per cell.

Pure functions of the host entry and the cells (no cluster needed), so that what mxbench
would submit can be read, tested and resubmitted by hand: the script carries its options as
``#SBATCH`` lines and runs cell ``$SLURM_ARRAY_TASK_ID``, then leaves its exit code in a
``.rc`` file next to the task's output.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mxbench.engines import stale
from mxbench.matrix import scale
from mxbench.matrix.params import control

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell
    from mxbench.matrix.hosts import SlurmHost

# A control character (a newline above all, or a Unicode line separator) would end a
# #SBATCH or export line early and start a new one: the rest of the value would run.
_CONTROL = control()
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnsafeScriptValue(ValueError):
    """A value that cannot be written into a batch script as one line (matrix validation
    refuses it earlier; this is the builder's own guarantee)."""


def _one_line(what: str, value: str) -> str:
    m = _CONTROL.search(value)
    if m:
        raise UnsafeScriptValue(f"{what}: control character {m.group()!r} in {value[:40]!r}")
    return value


def bench_command(host: SlurmHost, cell: Cell) -> list[str]:
    """The argv that runs one cell on a node: the shared interpreter or a container."""
    args = ["bench", *cell.bench_args()]
    image = host.container_image
    tasks = scale.processes(cell.params)  # a cell of several processes: srun starts each
    # block: ranks fill each node in node-list order (TensorFlow's TF_CONFIG counts on it)
    several = ["--kill-on-bad-exit=1", "--distribution=block"] if tasks > 1 else []
    launch = ["srun", f"--ntasks={tasks}", *several] if tasks > 1 else []
    if image is None:
        return [*launch, host.python or sys.executable, "-m", "mxbench", *args]
    if runtime(host) == "pyxis":
        pyxis = ["srun", f"--ntasks={tasks}", *several, f"--container-image={image}"]
        return [*pyxis, "mxbench", *args]
    gpu = bool(host.gres and "gpu" in host.gres) or any(
        o.startswith(("--gpus", "--gres=gpu", "-G")) for o in host.sbatch_options
    )
    return [*launch, "apptainer", "exec", *(["--nv"] if gpu else []), image, "mxbench", *args]


def runtime(host: SlurmHost) -> str:
    """The container runtime: ``container_runtime``, else pyxis (``srun --container-image``)."""
    return host.container_runtime or "pyxis"


def time_limit(host: SlurmHost, cells: Sequence[Cell]) -> str:
    """``--time``: the host's ``time_limit``, else the longest cell timeout in minutes."""
    if host.time_limit:
        return host.time_limit
    return str(max(1, math.ceil(max(c.timeout_s for c in cells) / 60)))


def tasks(host: SlurmHost, cells: Sequence[Cell]) -> list[str]:
    """The tasks of a submission: one, or a cell's processes (:func:`mxbench.matrix.scale.processes`:
    its ``nodes``, each torch's ``devices`` processes), ``tasks_per_node`` of its ``nodes``
    to a node (the engine submits cells of one shape together; a check of them all,
    sbatch --test-only, asks for the largest)."""
    count = max(scale.processes(c.params) for c in cells)
    if count == 1:
        return ["--ntasks=1"]
    if all(c.params.nodes <= host.tasks_per_node for c in cells):
        # one node holds them all; said so, not as tasks per node, which Slurm refuses
        # beyond a node's CPUs even under the host's --overcommit
        return [f"--ntasks={count}", "--nodes=1"]
    per_node = max(_per_node(host, c) for c in cells)
    return [f"--ntasks={count}", f"--ntasks-per-node={per_node}"]


def _per_node(host: SlurmHost, cell: Cell) -> int:
    """A cell's processes on one node: ``tasks_per_node`` of its ``nodes``, each its
    processes (torch: one per device)."""
    p = cell.params
    return min(p.nodes, host.tasks_per_node) * scale.processes(p) // p.nodes


def gres(host: SlurmHost, cells: Sequence[Cell]) -> str | None:
    """``--gres``: the host's, its GPU count set to what a node of the cells needs, each
    task's ``devices`` times the tasks on a node (the largest over ``cells``). The host's
    ``gres`` names the GPU kind (``gpu:a100:1``); its count is the cell's. A host without
    a ``gpu`` gres keeps its gres as written (on CPUs, devices are the host's split)."""
    if not host.gres:
        return None
    need = max(c.params.devices * min(c.params.nodes, host.tasks_per_node) for c in cells)
    items = []
    for item in host.gres.split(","):
        fields = item.strip().split(":")
        kind = fields[1:-1] if len(fields) > 1 and fields[-1].isdigit() else fields[1:]
        if fields[0] == "gpu" and len(kind) <= 1:  # gpu[:kind][:count]; others as written
            item = ":".join(["gpu", *kind, str(need)])
        items.append(item)
    return ",".join(items)


def shape(host: SlurmHost, cell: Cell) -> tuple[str, ...]:
    """What a cell's job asks for that differs between cells (its tasks, its GPUs): cells of
    one shape share a job array."""
    return (*tasks(host, [cell]), gres(host, [cell]) or "")


def sbatch_directives(
    host: SlurmHost, cells: Sequence[Cell], run_dir: Path, prefix: str, array: bool
) -> list[str]:
    """The sbatch options of one submission (written as ``#SBATCH`` lines)."""
    task = "%a" if array else "0"
    opts = [
        f"--job-name=mxbench-{host.name}",
        f"--comment={stale.LABEL}={stale.owner()}",  # swept if this run is killed (-9)
        f"--output={run_dir}/{prefix}-{task}.out",
        f"--error={run_dir}/{prefix}-{task}.err",
        f"--time={time_limit(host, cells)}",
        *tasks(host, cells),
    ]
    if array:
        opts.append(f"--array=0-{len(cells) - 1}")
    for key in ("partition", "gres", "constraint", "account"):
        value = gres(host, cells) if key == "gres" else getattr(host, key)
        if value:
            opts.append(f"--{key}={value}")
    if host.memory_limit is not None:  # sbatch --mem is in MiB
        opts.append(f"--mem={math.ceil(host.memory_limit / 2**20)}M")
    for extra in host.sbatch_options:
        opts.extend(shlex.split(extra))
    return opts


def job_script(
    host: SlurmHost, cells: Sequence[Cell], run_dir: Path, prefix: str, array: bool
) -> str:
    """A batch script that runs cell ``$SLURM_ARRAY_TASK_ID`` and leaves its exit code.

    Every value from the matrix is checked to be one line (:class:`UnsafeScriptValue`) and
    shell-quoted, so the script has exactly the lines written here whatever the input.
    """
    lines = ["#!/bin/bash"]
    lines += [
        f"#SBATCH {shlex.quote(_one_line('sbatch option', o))}"
        for o in sbatch_directives(host, cells, run_dir, prefix, array)
    ]
    lines += [
        "# Written by mxbench: one cell per array task; stdout carries the result record.",
        "export PYTHONUNBUFFERED=1",
    ]
    for k, v in sorted(host.env.items()):
        if not _ENV_NAME.fullmatch(k):
            raise UnsafeScriptValue(f"env: {k[:40]!r} is not a variable name")
        lines.append(f"export {k}={shlex.quote(_one_line(f'env.{k}', v))}")
    task = '"${SLURM_ARRAY_TASK_ID:-0}"' if array else "0"
    lines.append(f"task={task}")
    lines.append('case "$task" in')
    for i, cell in enumerate(cells):
        argv = [_one_line("bench command", a) for a in bench_command(host, cell)]
        lines.append(f"  {i}) set -- {shlex.join(argv)} ;;")
    lines.append('  *) echo "mxbench: no cell for task $task" >&2; exit 2 ;;')
    lines.append("esac")
    lines += RUN_BENCH
    rc_dir = shlex.quote(_one_line("workdir", str(run_dir)))
    lines.append(f'echo "$rc" > {rc_dir}/{shlex.quote(prefix)}-"$task".rc')
    lines.append('exit "$rc"')
    return "\n".join(lines) + "\n"


# How the script runs the bench ("$@") so that the bench never outlives its job. Slurm ends
# a job (scancel, its time limit) with SIGTERM to every process it tracks, then SIGKILL
# KillWait seconds later; without cgroups (proctrack/linuxproc) it tracks the descendants of
# the job's slurmstepd by their parent pids. A script that died of the SIGTERM before its
# bench left the bench reparented to init, out of the job: the SIGKILL missed it and it ran
# on (seen: a cancelled job's bench at 120% CPU for 12 minutes). So the script traps the
# ending signals, passes them on and goes on waiting: the bench stays its child, in the job,
# until it ends or the SIGKILL takes both; and where setpriv can, the bench is made to die
# with the script (PR_SET_PDEATHSIG) should the script be killed alone. The bench runs in a
# subshell that restores SIGINT / SIGQUIT (a background command of a script ignores them).
# A signalled script leaves no .rc file: the job's state says how it ended.
RUN_BENCH = [
    "if setpriv --pdeathsig KILL true 2>/dev/null; then "
    'set -- setpriv --pdeathsig KILL -- "$@"; fi',
    "bench= signalled=",
    *(
        f'trap \'signalled={sig}; [ -z "$bench" ] || kill -{sig} "$bench" 2>/dev/null\' {sig}'
        for sig in ("TERM", "INT", "HUP")
    ),
    '( trap - INT QUIT; exec "$@" ) &',
    'bench=$!; [ -z "$signalled" ] || kill -"$signalled" "$bench" 2>/dev/null',
    'while wait "$bench"; rc=$?; [ "$rc" -gt 128 ] && kill -0 "$bench" 2>/dev/null; do :; done',
    '[ -z "$signalled" ] || exit "$rc"',
]
