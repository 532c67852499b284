"""A memory cgroup for one local cell (``memory_limit`` on a local host).

The kernel enforces the limit: a bench that needs more is killed by the OOM killer inside
its cgroup, and the cgroup's own counter says so (``oom_kill`` in ``memory.events`` on
cgroup v2, in ``memory.oom_control`` on v1), which is the evidence the record's ``oom``
status rests on. Needs a writable memory controller (root, or a delegated subtree).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
import uuid
from pathlib import Path

from mxbench.engines import stale

ROOT = Path("/sys/fs/cgroup")


class CgroupUnavailable(Exception):
    pass


def _controller() -> tuple[Path, int]:
    """Where new memory cgroups go, and the cgroup version."""
    v1 = ROOT / "memory"
    if (v1 / "memory.limit_in_bytes").exists():
        return v1, 1
    if (ROOT / "cgroup.controllers").exists() and "memory" in (
        ROOT / "cgroup.subtree_control"
    ).read_text().split():
        return ROOT, 2
    raise CgroupUnavailable("no memory cgroup controller on this machine")


class MemoryCgroup:
    """A fresh cgroup with a hard memory limit (no swap beyond it)."""

    def __init__(self, limit: int, tag: str = "cell") -> None:
        parent, self.version = _controller()
        if not os.access(parent, os.W_OK):
            raise CgroupUnavailable(f"{parent} is not writable (memory_limit needs root)")
        # The owner's pid and start time in the name: sweep_stale() finds it after a kill -9.
        _, pid, started = stale.owner().split("/")
        self.path = parent / f"mxbench-{tag}-{pid}_{started}-{uuid.uuid4().hex[:8]}"
        try:
            self.path.mkdir()
            if self.version == 1:
                (self.path / "memory.limit_in_bytes").write_text(str(limit))
                swap = self.path / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(limit))
            else:
                (self.path / "memory.max").write_text(str(limit))
                swap = self.path / "memory.swap.max"
                if swap.exists():
                    swap.write_text("0")
        except OSError as exc:
            self.remove()
            raise CgroupUnavailable(f"cannot create a memory cgroup: {exc}") from None
        # Opened now, written in the child between fork and exec (no allocation there).
        self._procs = str(self.path / "cgroup.procs")

    def enter(self) -> None:
        """``preexec_fn``: move the child into the cgroup before it execs."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")  # 0 = the writing process
        finally:
            os.close(fd)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory in this cgroup."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with contextlib.suppress(OSError):
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def peak_bytes(self) -> int | None:
        """The most memory the cgroup held (v1 ``max_usage_in_bytes``, v2 ``memory.peak``)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        """Kill anything left inside, then remove the cgroup."""
        _remove(self.path)


_STALE = re.compile(r"^mxbench-.*-(\d+)_(\d+)-[0-9a-f]{8}$")


def sweep_stale(host: str) -> None:
    """Remove the memory cgroups (and what runs in them) of runs killed abruptly."""
    try:
        parent, _ = _controller()
        found = [p for p in parent.iterdir() if p.is_dir() and _STALE.match(p.name)]
    except (CgroupUnavailable, OSError):
        return
    machine = socket.gethostname()
    dead = [p for p in found if stale.gone(f"{machine}/{'/'.join(_STALE.findall(p.name)[0])}")]
    for path in dead:
        _remove(path)
    stale.say(host, "removed stale memory cgroups", len(dead))


def _remove(path: Path) -> None:
    """Kill anything left inside a cgroup, then remove it."""
    procs = path / "cgroup.procs"
    for _ in range(50):
        try:
            pids = procs.read_text().split()
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
