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

The batch script is built in :mod:`mxbench.engines.slurm_script`; the controller's answers
are parsed in :mod:`mxbench.engines.slurm_states`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mxbench.engines import retry, stale
from mxbench.engines.base import (
    STDOUT_LIMIT,
    Check,
    Engine,
    EngineUnavailable,
    Outcome,
    bounded,
    register,
)
from mxbench.engines.slurm_script import job_script, runtime, shape
from mxbench.engines.slurm_states import (
    FINAL_STATES,
    MEMORY_KILL,
    PENDING_STATES,
    SACCT_FIELDS,
    TaskState,
    parse_sacct,
    parse_scontrol,
    state_reason,
)
from mxbench.errors import UsageError
from mxbench.matrix.hosts import SlurmHost
from mxbench.records.codec import parse_bench_output, tail

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell


MAX_ARRAY_TASKS = 1000  # Slurm's default MaxArraySize is 1001 (task ids 0..1000)


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


@dataclass
class _Submission:
    prefix: str  # file name prefix of this submission's tasks
    cells: dict[int, Cell]  # task index -> cell
    array: bool
    job_id: str = ""


# --------------------------------------------------------------------------- the engine


@register
class SlurmEngine(Engine):
    name: ClassVar[str] = "slurm"
    host_model = SlurmHost
    host: SlurmHost

    poll_s: float = 5.0  # between two polls of the controller (env MXBENCH_SLURM_POLL_S)
    settle_s: float = 30.0  # wait for a finished task's files on a shared filesystem
    lost_after_s: float = 600.0  # give up when the controller does not answer this long
    # (a task whose .rc file is on the shared disk is taken from there meanwhile)

    def __init__(self, host: SlurmHost, matrix: Any) -> None:
        super().__init__(host, matrix)
        self.poll_s = _poll_s(os.environ.get("MXBENCH_SLURM_POLL_S"), self.poll_s)
        self.progress = SlurmProgress()
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
            raise EngineUnavailable(f"Slurm controller not reachable: {_last_line(info)}")
        self._sweep()
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
            raise EngineUnavailable(f"sbatch rejects the job for this host: {_last_line(test)}")

    def _sweep(self) -> None:
        """Cancel this host's jobs left by a run of this machine that was killed (-9)."""
        res = self._try(["squeue", "-h", "-n", f"mxbench-{self.host.name}", "-o", "%F|%k"])
        prefix = f"{stale.LABEL}="
        jobs = {
            job
            for job, _, comment in (line.partition("|") for line in res.stdout.splitlines())
            if comment.startswith(prefix) and stale.gone(comment.removeprefix(prefix))
        }
        if jobs:
            self._try(["scancel", *sorted(jobs)])
        stale.say(self.host.name, "cancelled stale Slurm jobs", len(jobs))

    def doctor(self, cells: Sequence[Cell]) -> Iterator[Check]:
        if shutil.which("sbatch") is None:
            yield Check(
                "reachable",
                "fail",
                "sbatch not found on PATH",
                "run mxbench on a Slurm submit (login) node",
            )
            return
        version = _call(["sinfo", "--version"]).stdout.strip()
        info = _call(["sinfo", "-h", "-o", "%P %a %D %G"])
        if info.returncode != 0:
            yield Check(
                "reachable",
                "fail",
                f"controller: {_last_line(info)}",
                "check slurmctld and munge (`scontrol ping`)",
            )
            return
        yield Check("reachable", "ok", f"{version}; {self.machine().removeprefix('slurm:')}")
        work = self._workdir()
        try:
            work.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=work).close()
        except OSError as exc:
            yield Check(
                "workdir",
                "fail",
                f"{work}: {exc.strerror}",
                "set workdir: to a writable directory the nodes share",
            )
            return
        yield Check("workdir", "ok", str(work))
        if cells:
            script = job_script(self.host, cells, work, "doctor", self.host.array)
            test = _call(["sbatch", "--test-only"], script)
            asked = (
                ", ".join(
                    f"{k} {v}"
                    for k in ("partition", "gres", "account", "constraint")
                    if (v := getattr(self.host, k))
                )
                or "the default partition"
            )
            yield (
                Check("job accepted", "ok", f"{asked}: {_last_line(test)}")
                if test.returncode == 0
                else Check(
                    "job accepted",
                    "fail",
                    f"{asked}: {_last_line(test)}",
                    "fix partition / gres / account / constraint (see `sinfo`)",
                )
            )

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
        """``scancel`` every job of this run, waiting at most :attr:`cancel_wait_s` for it
        (its retries of a controller that does not answer go on meanwhile; a job left is the
        next run's sweep). The watch then stops within that time too."""
        self._cancelled.set()
        jobs = list(self._submitted)
        if jobs:
            scancel = lambda: self._try(["scancel", *jobs])  # noqa: E731
            bounded(f"{self.host.name}: scancel", scancel, self.cancel_wait_s)

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
        """One job array per chunk of cells of one shape (the job's tasks, its GPUs), or one
        job per cell (``array: false``)."""
        if not self.host.array:
            return [_Submission(f"c{i}", {0: c}, False) for i, c in enumerate(cells)]
        by_shape: dict[tuple[str, ...], list[Cell]] = {}
        for c in cells:
            by_shape.setdefault(shape(self.host, c), []).append(c)
        chunks = [
            group[i : i + MAX_ARRAY_TASKS]
            for group in by_shape.values()
            for i in range(0, len(group), MAX_ARRAY_TASKS)
        ]
        return [_Submission(f"a{k}", dict(enumerate(c)), True) for k, c in enumerate(chunks)]

    def _submit(self, sub: _Submission) -> str | None:
        """sbatch one submission; the error message if the cluster refused it."""
        assert self.run_dir is not None
        cells = list(sub.cells.values())
        script = self.run_dir / f"{sub.prefix}.sh"
        script.write_text(job_script(self.host, cells, self.run_dir, sub.prefix, sub.array))
        res = self._sbatch(script)
        if res.returncode != 0:
            return f"sbatch refused the job: {_last_line(res)}"
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
        cancelled_at: float | None = None
        while left:
            if self._cancelled.is_set():  # the tasks that end meanwhile, briefly, no longer
                cancelled_at = cancelled_at or time.monotonic()
                if time.monotonic() - cancelled_at > self.cancel_wait_s:
                    return
            listings = {id(s): self._states(s) for s in subs}
            if any(v is not None for v in listings.values()):
                last_contact = time.monotonic()
            elif time.monotonic() - last_contact > self.lost_after_s:
                for sub, t in left.values():
                    reason = f"lost contact with the Slurm controller for {self.lost_after_s:g} s"
                    self.progress.done += 1
                    yield sub.cells[t], Outcome(returncode=None, status="error", reason=reason)
                self._try(["scancel", *{s.job_id for s, _ in left.values() if s.job_id}])
                return
            queued = running = 0
            for key, (sub, t) in list(left.items()):
                listing = listings[id(sub)]
                if listing is None:  # no answer: a task that wrote its .rc is done all the same
                    on_disk = self._finished_on_disk(sub, t)
                    if on_disk is None:
                        queued += 1  # ask again at the next poll
                        continue
                    st = on_disk
                else:
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
            res = self._try(["sacct", "-X", "-n", "-P", "-o", SACCT_FIELDS, "-j", sub.job_id])
            st = parse_sacct(res.stdout).get(t if sub.array else None)
            if st is not None:
                return st
        job_id = f"{sub.job_id}_{t}" if sub.array else sub.job_id
        return self._finished_on_disk(sub, t) or TaskState(
            job_id, "UNKNOWN", reason="purged by the controller, no accounting"
        )

    def _finished_on_disk(self, sub: _Submission, t: int) -> TaskState | None:
        """A task whose script wrote its ``.rc`` (last, after the bench exited) is finished,
        whatever the controller says or whether it answers."""
        rc = self._rc(sub, t)
        if rc is None:
            return None
        job_id = f"{sub.job_id}_{t}" if sub.array else sub.job_id
        return TaskState(job_id, "COMPLETED" if rc == 0 else "FAILED", f"{rc}:0")

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
        o.finished_at = st.end if st.end is not None and st.start is not None else time.time()
        o.started_at = st.start if st.start is not None else o.finished_at - o.wall_s
        if self.host.container_image:
            o.image = {"name": self.host.container_image, "runtime": runtime(self.host)}
        if st.state == "COMPLETED" or (
            st.state == "FAILED" and parse_bench_output(stdout) is not None
        ):
            return o  # the bench's own record (or its absence) decides
        o.status, o.reason = "error", state_reason(st, returncode)
        if st.state == "TIMEOUT":
            o.timed_out, o.status = True, "timeout"
        elif st.state == "OUT_OF_MEMORY" or MEMORY_KILL.search(stderr + stdout):
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
        """A controller command, retried while the controller is unreachable (bounded)."""
        return retry.on_result(
            f"host {self.host.name}: {argv[0]}", lambda: _call(argv, stdin), _transient
        )

    def _sbatch(self, script: Path) -> subprocess.CompletedProcess[str]:
        """``sbatch --parsable SCRIPT``, retried like :meth:`_try`; an attempt that timed out
        may still have queued the job, so before submitting again the queue is searched for
        a job of this very script (never two jobs for one submission)."""
        tried = False

        def once() -> subprocess.CompletedProcess[str]:
            nonlocal tried
            if tried:
                queued = _call(["squeue", "--me", "-h", "-t", "all", "-o", "%F %o"])
                for line in queued.stdout.splitlines():
                    job, _, command = line.partition(" ")
                    if command.strip() == str(script):
                        return subprocess.CompletedProcess(["sbatch"], 0, job, "")
            tried = True
            return _call(["sbatch", "--parsable", str(script)])

        return retry.on_result(f"host {self.host.name}: sbatch", once, _transient)

    def machine(self) -> str:
        """The cluster (``ClusterName``): hosts submitting to one cluster share its nodes."""
        res = self._try(["scontrol", "show", "config"])
        m = re.search(r"ClusterName\s*=\s*(\S+)", res.stdout)
        return f"slurm:{m.group(1) if m else os.environ.get('SLURM_CONF', 'default')}"


# What the Slurm commands print when the controller is unreachable *now* (worth retrying),
# as opposed to a refusal (bad partition, bad account) that no retry changes.
TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted|"
    r"Connection refused|connect failure|Resource temporarily unavailable|"
    r"Communication connection failure|Transport endpoint is not connected|timed out after",
    re.IGNORECASE,
)


def _transient(res: subprocess.CompletedProcess[str]) -> bool:
    return res.returncode != 0 and bool(TRANSIENT.search(res.stderr or res.stdout or ""))


def _call(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 255, "", f"{argv[0]} timed out after 60 s")
    except (OSError, subprocess.SubprocessError) as exc:
        return subprocess.CompletedProcess(argv, 255, "", str(exc))


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


def _last_line(res: subprocess.CompletedProcess[str]) -> str:
    text = (res.stderr or res.stdout).strip()
    return text.splitlines()[-1] if text else f"exit code {res.returncode}"


def _read(path: Path, limit: int = STDOUT_LIMIT) -> str:
    """The end of a job's output file (at most ``limit`` bytes: the output is untrusted)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - limit))
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""
