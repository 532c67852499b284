"""``engine: slurm``: cells as Slurm jobs, through the cluster's own scheduler.

All cells of a host go to the cluster in one ``sbatch`` as a job array (``array: false``:
one job per cell); array task ``i`` runs cell ``i``'s ``mxbench bench`` and writes its
stdout / stderr to ``<run dir>/<prefix>-<i>.out`` / ``.err`` and its exit code to ``.rc``
in a shared working directory. Outcomes are yielded as tasks finish, read from those files;
the job state decides the status when the bench left no record (TIMEOUT -> timeout,
OUT_OF_MEMORY -> oom, NODE_FAIL / CANCELLED / FAILED / ... -> error naming the state).

Job states come from ``scontrol show job`` (finished jobs stay there MinJobAge seconds,
300 by default); a task the controller has forgotten is looked up with ``sacct`` when the
cluster keeps accounting, else decided by its ``.rc`` file. :meth:`SlurmEngine.cancel`
(Ctrl-C) runs ``scancel`` on every job this engine submitted; so does closing the
generator early.

Progress: :attr:`SlurmEngine.progress` (queued / running / done / total, updated on every
poll), :meth:`SlurmEngine.progress_note` (``"slurm 123: 4 queued, 2 running, 6/12 done"``)
and an optional :attr:`SlurmEngine.on_progress` callback called after every poll.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mxbench.cells import Cell
from mxbench.engines.base import Engine, EngineUnavailable, Outcome
from mxbench.errors import UsageError
from mxbench.matrix import SlurmHost
from mxbench.results import parse_bench_output, tail

MAX_ARRAY_TASKS = 1000  # Slurm's default MaxArraySize is 1001 (task ids 0..1000)
PENDING_STATES = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING"}
)
# Everything that is neither pending nor one of these counts as running (RUNNING,
# COMPLETING, SUSPENDED, STAGE_OUT, ...): the task is not finished yet.
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "CANCELLED",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
        "UNKNOWN",  # ours: the controller forgot the task and nothing else knows its end
    }
)

# slurmstepd's lines when it kills a step for memory (jobacct_gather or cgroup enforcement).
_MEMORY_KILL = re.compile(
    r"slurmstepd.*(exceeded (job )?memory limit|oom[_-]kill event)", re.IGNORECASE
)


@dataclass
class SlurmProgress:
    """Task counts of the current run, updated on every poll."""

    total: int = 0
    queued: int = 0
    running: int = 0
    done: int = 0
    job_ids: list[str] = field(default_factory=list)

    def note(self) -> str:
        jobs = ",".join(self.job_ids) or "-"
        return (
            f"slurm {jobs}: {self.queued} queued, {self.running} running, "
            f"{self.done}/{self.total} done"
        )


@dataclass(frozen=True)
class TaskState:
    """One array task (or plain job) as the controller reports it."""

    job_id: str  # "123_4" for an array task, "123" for a plain job
    state: str
    exit_code: str = ""  # "rc:signal"
    reason: str = ""
    node: str = ""
    run_s: float | None = None
    time_limit: str = ""
    cpus: int | None = None

    @property
    def returncode(self) -> int | None:
        m = re.fullmatch(r"(\d+):(\d+)", self.exit_code)
        if not m:
            return None
        rc, sig = int(m.group(1)), int(m.group(2))
        return -sig if sig else rc


@dataclass
class _Submission:
    prefix: str  # file name prefix of this submission's tasks
    cells: dict[int, Cell]  # task index -> cell
    array: bool
    job_id: str = ""


# --------------------------------------------------------------------------- commands


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


# --------------------------------------------------------------------------- controller


def _duration_s(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS (or MM:SS) as seconds."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if not m:
        return None
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return float(((d * 24 + h) * 60 + mi) * 60 + s)


def _task_ids(spec: str) -> list[int]:
    """``0-3,7`` or ``2-9%4`` (a pending array's remaining tasks) as task ids."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        step = 1
        if ":" in hi:
            hi, s = hi.split(":")
            step = int(s)
        out.extend(range(int(lo), int(hi or lo) + 1, step))
    return out


def parse_scontrol(text: str) -> dict[int | None, TaskState]:
    """``scontrol show job -o`` output: task id (None for a plain job) -> state."""
    states: dict[int | None, TaskState] = {}
    for line in text.splitlines():
        f = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobState" not in f:
            continue
        array_id = f.get("ArrayJobId")
        base = dict(
            state=f["JobState"],
            exit_code=f.get("ExitCode", ""),
            reason=f.get("Reason", ""),
            node=f.get("NodeList", "") if f.get("NodeList") != "(null)" else "",
            run_s=_duration_s(f.get("RunTime", "")),
            time_limit=f.get("TimeLimit", ""),
            cpus=int(f["NumCPUs"]) if f.get("NumCPUs", "").isdigit() else None,
        )
        if array_id and f.get("ArrayTaskId"):
            for t in _task_ids(f["ArrayTaskId"]):
                states[t] = TaskState(job_id=f"{array_id}_{t}", **base)
        else:
            states[None] = TaskState(job_id=f.get("JobId", ""), **base)
    return states


def parse_sacct(text: str) -> dict[int | None, TaskState]:
    """``sacct -X -n -P -o JobID,State,ExitCode,NodeList,ElapsedRaw,Timelimit`` output."""
    states: dict[int | None, TaskState] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        job, state, code, node, elapsed, limit = parts[:6]
        m = re.fullmatch(r"\d+(?:_(\d+))?", job)
        if not m:
            continue  # "123_[4-9]": tasks not started yet
        st = TaskState(
            job_id=job,
            state=state.split()[0] if state else "",
            exit_code=code,
            node=node,
            run_s=float(elapsed) if elapsed.isdigit() else None,
            time_limit=limit,
        )
        states[int(m.group(1)) if m.group(1) else None] = st
    return states


# --------------------------------------------------------------------------- the engine


class SlurmEngine(Engine):
    name = "slurm"
    host: SlurmHost

    poll_s: float = 5.0  # between two polls of the controller (env MXBENCH_SLURM_POLL_S)
    settle_s: float = 30.0  # wait for a finished task's files on a shared filesystem
    lost_after_s: float = 600.0  # give up when the controller does not answer this long

    def __init__(self, host: SlurmHost, matrix: Any) -> None:
        super().__init__(host, matrix)
        self.poll_s = _poll_s(os.environ.get("MXBENCH_SLURM_POLL_S"), self.poll_s)
        self.progress = SlurmProgress()
        self.on_progress: Callable[[SlurmProgress], None] | None = None
        self.run_dir: Path | None = None
        self._submitted: list[str] = []
        self._cancelled = threading.Event()
        self._accounting: bool | None = None

    # ---------------------------------------------------------------- interface

    def prepare(self, cells: Sequence[Cell]) -> None:
        if shutil.which("sbatch") is None:
            raise EngineUnavailable(
                "sbatch not found on PATH: run mxbench on a Slurm submit (login) node"
            )
        info = self._try(["sinfo", "-h", "-o", "%P"])
        if info.returncode != 0:
            raise EngineUnavailable(f"Slurm controller not reachable: {_first(info)}")
        if not cells:
            return
        # Ask the controller whether it would accept this job (partition, gres, account,
        # constraint, time limit, extra options) before anything is queued.
        work = self._workdir()
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EngineUnavailable(f"workdir {work}: cannot create it ({exc.strerror})") from None
        script = job_script(self.host, cells, work, "test", self.host.array)
        test = self._try(["sbatch", "--test-only"], stdin=script)
        if test.returncode != 0:
            raise EngineUnavailable(f"sbatch rejects the job for this host: {_first(test)}")

    def run_one(self, cell: Cell) -> Outcome:
        done = list(self.run([cell]))
        if not done:
            return Outcome(returncode=None, status="error", reason="cancelled before submission")
        return done[0][1]

    def run(self, cells: Sequence[Cell]) -> Iterator[tuple[Cell, Outcome]]:
        if not cells:
            return
        self.run_dir = self._new_run_dir()
        subs = self._plan(cells)
        self.progress = SlurmProgress(total=len(cells), queued=len(cells))
        finished = False
        try:
            for sub in subs:
                if self._cancelled.is_set():
                    break
                error = self._submit(sub)
                if error:
                    for cell in sub.cells.values():
                        yield cell, Outcome(returncode=None, status="error", reason=error)
                        self.progress.done += 1
                        self.progress.queued -= 1
            live = [s for s in subs if s.job_id]
            yield from self._watch(live)
            finished = True
        finally:
            if not finished:
                self.cancel()

    def cancel(self) -> None:
        self._cancelled.set()
        if self._submitted:
            self._try(["scancel", *self._submitted])

    def progress_note(self) -> str:
        return self.progress.note()

    # ---------------------------------------------------------------- submission

    def _workdir(self) -> Path:
        return Path(self.host.workdir or Path.cwd() / ".mxbench-slurm").expanduser().resolve()

    def _new_run_dir(self) -> Path:
        work = self._workdir()
        work.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Path(tempfile.mkdtemp(prefix=f"{self.host.name}-{stamp}-", dir=work))

    def _plan(self, cells: Sequence[Cell]) -> list[_Submission]:
        if self.host.array:
            chunks = [cells[i : i + MAX_ARRAY_TASKS] for i in range(0, len(cells), MAX_ARRAY_TASKS)]
            return [_Submission(f"a{k}", dict(enumerate(c)), True) for k, c in enumerate(chunks)]
        return [_Submission(f"c{i}", {0: c}, False) for i, c in enumerate(cells)]

    def _submit(self, sub: _Submission) -> str | None:
        """sbatch one submission; the error message if the cluster refused it."""
        assert self.run_dir is not None
        cells = list(sub.cells.values())
        script = self.run_dir / f"{sub.prefix}.sh"
        script.write_text(job_script(self.host, cells, self.run_dir, sub.prefix, sub.array))
        res = self._try(["sbatch", "--parsable", str(script)])
        if res.returncode != 0:
            return f"sbatch refused the job: {_first(res)}"
        sub.job_id = res.stdout.strip().split(";")[0]
        self._submitted.append(sub.job_id)
        self.progress.job_ids.append(sub.job_id)
        if self._cancelled.is_set():  # Ctrl-C arrived while sbatch ran
            self.cancel()
        return None

    # ---------------------------------------------------------------- watching

    def _watch(self, subs: list[_Submission]) -> Iterator[tuple[Cell, Outcome]]:
        left = {(id(s), t): (s, t) for s in subs for t in s.cells}
        last_contact = time.monotonic()
        while left:
            listings = {id(s): self._states(s) for s in subs}
            if any(v is not None for v in listings.values()):
                last_contact = time.monotonic()
            elif time.monotonic() - last_contact > self.lost_after_s:
                for sub, t in left.values():
                    reason = f"lost contact with the Slurm controller for {self.lost_after_s:g} s"
                    self.progress.done += 1
                    yield sub.cells[t], Outcome(returncode=None, status="error", reason=reason)
                return
            queued = running = 0
            for key, (sub, t) in list(left.items()):
                listing = listings[id(sub)]
                if listing is None:  # no answer this time: ask again at the next poll
                    queued += 1
                    continue
                st = listing.get(t if sub.array else None) or self._forgotten(sub, t)
                if st.state in PENDING_STATES:
                    queued += 1
                    continue
                if st.state not in FINAL_STATES:
                    running += 1
                    continue
                del left[key]
                self.progress.done += 1
                yield sub.cells[t], self._outcome(sub, t, st)
            self.progress.queued, self.progress.running = queued, running
            if self.on_progress is not None:
                self.on_progress(self.progress)
            if left:
                self._cancelled.wait(self.poll_s if not self._cancelled.is_set() else 1.0)

    def _states(self, sub: _Submission) -> dict[int | None, TaskState] | None:
        """The job's tasks; ``{}`` when the controller no longer knows it, None if no answer."""
        res = self._try(["scontrol", "show", "job", "-o", sub.job_id])
        if res.returncode == 0:
            return parse_scontrol(res.stdout)
        if "Invalid job id" in res.stderr:
            return {}
        return None

    def _forgotten(self, sub: _Submission, t: int) -> TaskState:
        """A task the controller no longer lists: accounting, else its ``.rc`` file."""
        if self._has_accounting():
            fmt = "JobID,State,ExitCode,NodeList,ElapsedRaw,Timelimit"
            res = self._try(["sacct", "-X", "-n", "-P", "-o", fmt, "-j", sub.job_id])
            st = parse_sacct(res.stdout).get(t if sub.array else None)
            if st is not None:
                return st
        job_id = f"{sub.job_id}_{t}" if sub.array else sub.job_id
        rc = self._rc(sub, t)
        if rc is not None:
            return TaskState(job_id, "COMPLETED" if rc == 0 else "FAILED", f"{rc}:0")
        return TaskState(job_id, "UNKNOWN", reason="purged by the controller, no accounting")

    def _has_accounting(self) -> bool:
        if self._accounting is None:
            res = self._try(["scontrol", "show", "config"])
            m = re.search(r"AccountingStorageType\s*=\s*(\S+)", res.stdout)
            self._accounting = bool(m and m.group(1) != "accounting_storage/none")
        return self._accounting

    def _files(self, sub: _Submission, t: int) -> tuple[Path, Path, Path]:
        assert self.run_dir is not None
        base = self.run_dir / f"{sub.prefix}-{t}"
        return base.with_suffix(".out"), base.with_suffix(".err"), base.with_suffix(".rc")

    def _rc(self, sub: _Submission, t: int) -> int | None:
        text = _read(self._files(sub, t)[2]).strip()
        return int(text) if text.lstrip("-").isdigit() else None

    def _outcome(self, sub: _Submission, t: int, st: TaskState) -> Outcome:
        out, err, _ = self._files(sub, t)
        code = st.returncode
        if st.state in ("COMPLETED", "FAILED") and code is not None and code >= 0:
            # The script exited on its own and wrote .rc last: once it is there, the output
            # is complete (a shared filesystem may show it a little later than the node).
            deadline = time.monotonic() + self.settle_s
            while self._rc(sub, t) is None and time.monotonic() < deadline:
                time.sleep(0.5)
        rc = self._rc(sub, t)
        stdout, stderr = _read(out), _read(err)
        returncode = rc if rc is not None else code
        extra = {
            "slurm": {
                "job_id": st.job_id,
                "state": st.state,
                "exit_code": st.exit_code or None,
                "node": st.node or None,
                "time_limit": st.time_limit or None,
                "cpus": st.cpus,
                "stdout": str(out),
            }
        }
        o = Outcome(returncode, stdout, stderr, wall_s=st.run_s or 0.0, extra=extra)
        if self.host.container_image:
            o.image = {"name": self.host.container_image, "runtime": runtime(self.host)}
        if st.state == "COMPLETED" or (
            st.state == "FAILED" and parse_bench_output(stdout) is not None
        ):
            return o  # the bench's own record (or its absence) decides
        o.status, o.reason = "error", _state_reason(st, returncode)
        if st.state == "TIMEOUT":
            o.timed_out, o.status = True, "timeout"
        elif st.state == "OUT_OF_MEMORY" or _MEMORY_KILL.search(stderr + stdout):
            # Without cgroups Slurm's memory enforcement (jobacct_gather) ends the job as
            # FAILED / CANCELLED; slurmstepd's own line in the job's stderr says why.
            o.oom_killed, o.status = True, "oom"
            if st.state != "OUT_OF_MEMORY":
                o.reason = f"Slurm job {st.job_id} was killed for exceeding its memory " + (
                    f"(state {st.state}, slurmstepd: exceeded memory limit)"
                )
        log = tail(stderr or stdout)
        if log:
            o.reason += "\n" + log
        return o

    def _try(self, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                argv, input=stdin, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return subprocess.CompletedProcess(argv, 255, "", str(exc))


def _state_reason(st: TaskState, returncode: int | None) -> str:
    what = {
        "TIMEOUT": f"exceeded its time limit ({st.time_limit or '?'}) and was killed",
        "OUT_OF_MEMORY": "was killed for exceeding its memory",
        "NODE_FAIL": f"was lost with its node ({st.node or '?'})",
        "CANCELLED": "was cancelled",
        "FAILED": f"failed with exit code {returncode}",
        "PREEMPTED": "was preempted",
        "BOOT_FAIL": "could not boot its node",
        "DEADLINE": "missed its deadline",
    }.get(st.state, "ended")
    why = f"; reason: {st.reason}" if st.reason and st.reason not in ("None", "(null)") else ""
    return f"Slurm job {st.job_id} {what} (state {st.state}{why})"


def _poll_s(text: str | None, default: float) -> float:
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 3600:
        raise UsageError(f"MXBENCH_SLURM_POLL_S={text!r}: expected seconds between 0 and 3600")
    return value


def _first(res: subprocess.CompletedProcess[str]) -> str:
    text = (res.stderr or res.stdout).strip()
    return text.splitlines()[-1] if text else f"exit code {res.returncode}"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
