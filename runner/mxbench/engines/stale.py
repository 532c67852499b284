"""What an orchestrator that died abruptly (``kill -9``, a lost machine) left running.

Everything an engine starts carries its owner, :data:`OWNER` (``machine/pid/start time``
of this ``mxbench run``): local bench processes in their environment (inherited by what
they start), containers as a label, Slurm jobs as their comment, memory cgroups in their
name. The next run on the same machine sweeps what belongs to an owner that no longer
runs (:func:`gone`): a process killed, a container removed, a job cancelled. Work whose
owner runs on another machine, or still runs, is never touched.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import sys
from pathlib import Path

ENV = "MXBENCH_OWNER"
LABEL = "io.mxbench.owner"


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): a pid reused later differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


@functools.cache
def owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{_start_time(pid) or 0}"


def gone(tag: str) -> bool:
    """Whether ``tag`` names an mxbench run of this machine that no longer runs."""
    machine, _, rest = tag.partition("/")
    pid, _, started = rest.partition("/")
    if machine != socket.gethostname() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != started


def say(host: str, what: str, n: int) -> None:
    if n:
        print(
            f"mxbench: host {host}: {what} ({n}) left by an earlier run that was killed",
            file=sys.stderr,
            flush=True,
        )


def sweep_processes(host: str) -> int:
    """Kill this user's processes whose :data:`ENV` names an owner that is gone."""
    killed = 0
    mine = os.getuid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != mine:
                continue
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(ENV.encode() + b"="):
                if gone(item.split(b"=", 1)[1].decode("utf-8", "replace")):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(entry.name), signal.SIGKILL)
                        killed += 1
                break
    say(host, "killed stale bench processes", killed)
    return killed
