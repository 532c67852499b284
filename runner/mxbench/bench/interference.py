"""What else the machine was doing during a timed window: measured, never guessed.

A snapshot (:func:`snapshot`) reads, in well under a millisecond on a quiet machine:

- the CPU time this process got (``getrusage``: user + system, every thread) and the time its
  threads spent *runnable but waiting* for a CPU (``/proc/self/task/*/schedstat``, the
  scheduler's run delay): what it asked for and did not get;
- the whole machine's busy and steal time (``/proc/stat``): busy minus this process's CPU is
  what the *other* processes used;
- CPU pressure (``/proc/pressure/cpu``, the ``some`` total: time some task waited for a CPU),
  where the kernel has PSI.

Two snapshots make a :class:`~mxbench.records.record.Interference` (:func:`between`): each figure as
a share of the window's wall time (``others_cores``: how many cores' worth the other
processes held, 0.31 = 31 % of one core). A window is *disturbed* (:func:`disturbed`) when
the other processes held at least :data:`OTHERS_CORES` of a core while the machine had less
than :data:`SPARE_CORES` to spare, or the hypervisor stole at least :data:`STEAL_SHARE` of
a core (all measured; what the thresholds mean is in docs/measuring.md). This process's
run delay is recorded, not judged: a framework with more threads than cores waits for them
on an idle machine too. On a GPU, other processes on the device and NVML's throttle reasons are
read by :mod:`mxbench.bench.evidence.gpu_health` and marked the same way.

Files a kernel lacks are left out (their figures stay null), never an error.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

from mxbench.records.record import Interference

# A window is disturbed from these on (cores' worth of CPU per second of wall time).
OTHERS_CORES = 0.15
SPARE_CORES = 0.5
STEAL_SHARE = 0.05

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Snapshot:
    wall: float  # perf_counter
    own_cpu: float  # s, this process (every thread)
    own_wait: float | None  # s, this process's threads runnable but not running
    busy: float | None  # s, the machine's CPUs busy (every process, summed over CPUs)
    steal: float | None  # s, stolen by the hypervisor (summed over CPUs)
    pressure: float | None  # s, PSI cpu "some" total


def _own_wait() -> float | None:
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _stat() -> tuple[float | None, float | None]:
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None, None
    if not fields or fields[0] != b"cpu":
        return None, None
    ticks = [int(x) for x in fields[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice (guest is in user)
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]
    steal = ticks[7] if len(ticks) > 7 else 0
    return busy / _TICK, steal / _TICK


def _pressure() -> float | None:
    try:
        with open("/proc/pressure/cpu", "rb") as f:
            first = f.readline().split()
    except OSError:
        return None
    for item in first:
        if item.startswith(b"total="):
            return int(item[6:]) / 1e6
    return None


def snapshot() -> Snapshot:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    busy, steal = _stat()
    return Snapshot(
        wall=time.perf_counter(),
        own_cpu=usage.ru_utime + usage.ru_stime,
        own_wait=_own_wait(),
        busy=busy,
        steal=steal,
        pressure=_pressure(),
    )


def _per_s(a: float | None, b: float | None, wall: float) -> float | None:
    if a is None or b is None or wall <= 0:
        return None
    return round(max(0.0, b - a) / wall, 4)


def between(a: Snapshot, b: Snapshot) -> Interference:
    """What happened between two snapshots, per second of wall time."""
    wall = b.wall - a.wall
    own = _per_s(a.own_cpu, b.own_cpu, wall)
    busy = _per_s(a.busy, b.busy, wall)
    # /proc/stat counts in ticks (10 ms): a short window's busy time is coarse, and this
    # process's precise CPU time may exceed it by a tick; never below zero
    others = round(max(0.0, busy - own), 4) if busy is not None and own is not None else None
    wait = _per_s(a.own_wait, b.own_wait, wall)
    steal = _per_s(a.steal, b.steal, wall)
    pressure = _per_s(a.pressure, b.pressure, wall)
    return Interference(
        own_cores=own,
        waited_cores=wait,
        others_cores=others,
        steal_cores=steal,
        pressure=pressure,
        disturbed=disturbed(own, others, steal),
    )


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def disturbed(
    own: float | None, others: float | None, steal: float | None, ncpu: int | None = None
) -> bool:
    """Whether the other processes or the hypervisor took CPU this process could have used."""
    ncpu = ncpu or cores()
    contended = (
        others is not None
        and others >= OTHERS_CORES
        and (own or 0.0) + others >= ncpu - SPARE_CORES
    )
    return bool(contended or (steal is not None and steal >= STEAL_SHARE))
