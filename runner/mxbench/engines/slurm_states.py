"""What the Slurm controller says about jobs: ``scontrol`` / ``sacct`` output, job states.

Parsing only (no subprocesses): :func:`parse_scontrol` for ``scontrol show job -o``,
:func:`parse_sacct` for ``sacct -X -n -P`` when the cluster keeps accounting, and
:func:`state_reason` for the one line a record's ``error`` gets when a job ended badly.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

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
MEMORY_KILL = re.compile(
    r"slurmstepd.*(exceeded (job )?memory limit|oom[_-]kill event)", re.IGNORECASE
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
    start: float | None = None  # epoch seconds (the controller's StartTime / EndTime)
    end: float | None = None

    @property
    def returncode(self) -> int | None:
        m = re.fullmatch(r"(\d+):(\d+)", self.exit_code)
        if not m:
            return None
        rc, sig = int(m.group(1)), int(m.group(2))
        return -sig if sig else rc


def duration_s(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS (or MM:SS) as seconds."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if not m:
        return None
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return float(((d * 24 + h) * 60 + mi) * 60 + s)


def timestamp(text: str) -> float | None:
    """Slurm's ``2026-11-23T10:04:05`` (the controller's local time) as epoch seconds;
    None for ``Unknown``, ``None`` or an empty field."""
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def task_ids(spec: str) -> list[int]:
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
            run_s=duration_s(f.get("RunTime", "")),
            time_limit=f.get("TimeLimit", ""),
            cpus=int(f["NumCPUs"]) if f.get("NumCPUs", "").isdigit() else None,
            start=timestamp(f.get("StartTime", "")),
            end=timestamp(f.get("EndTime", "")),
        )
        if array_id and f.get("ArrayTaskId"):
            for t in task_ids(f["ArrayTaskId"]):
                states[t] = TaskState(job_id=f"{array_id}_{t}", **base)
        else:
            states[None] = TaskState(job_id=f.get("JobId", ""), **base)
    return states


SACCT_FIELDS = "JobID,State,ExitCode,NodeList,ElapsedRaw,Timelimit,Start,End"


def parse_sacct(text: str) -> dict[int | None, TaskState]:
    """``sacct -X -n -P -o`` :data:`SACCT_FIELDS` output."""
    states: dict[int | None, TaskState] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        job, state, code, node, elapsed, limit = parts[:6]
        start, end = [*parts[6:8], "", ""][:2]
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
            start=timestamp(start),
            end=timestamp(end),
        )
        states[int(m.group(1)) if m.group(1) else None] = st
    return states


def state_reason(st: TaskState, returncode: int | None) -> str:
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
