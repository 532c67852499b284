"""Work over many independent items, in worker processes when there are enough of them.

A large report is thousands of sections, each a pure function of its table: built and
rendered one after another they were about half of a 100,000-record report's time
(benchmarks/report_speed.py). :class:`Pending` hands contiguous runs of them to forked
workers of a :class:`concurrent.futures.ProcessPoolExecutor` (one fewer than the cores) as
soon as the items can be made, and this process, once done with what it does meanwhile
(the answer grids), takes the runs no worker has started; forked workers inherit the merged
records and tables as they stand, so only the results (text) cross back.

It stays in one process where forking is not safe or not worth it: fewer than
:data:`MIN_ITEMS` items, one usable core, a platform other than Linux, a process that runs
threads already (forking those can deadlock the child: an imported framework's thread
pool, a progress bar's refresher), or less memory free than the process holds. A worker
that dies (the kernel's OOM killer) costs the parallelism, not the report: the items are
then done here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Generic, TypeVar

R = TypeVar("R")

MIN_ITEMS = 256  # below this, forking costs more than it saves
PARTS = 32  # runs of items: the workers take them from the front, this process from the back

_job: Callable[[int], Any] | None = None  # what the forked workers run (set while they do)


BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def prepare() -> None:
    """Call before numpy is imported: one BLAS thread, unless the environment says
    otherwise. numpy's BLAS starts a thread per core at import, and a process with threads
    is not forked (:func:`can_fork`); the report's numpy work is element-wise and small, so
    one thread loses nothing."""
    for name in BLAS_THREADS:
        os.environ.setdefault(name, "1")


def workers() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _threads() -> int:
    """Threads of this process, native ones included (Linux's /proc; 1 when unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 1


def _room() -> bool:
    """Whether the machine has as much memory free as this process holds: a forked worker
    copies the pages it touches (reference counts are writes), so the workers together can
    come to about one more copy of this process (measured: 0.9 GiB -> 1.65 GiB in all for
    100,000 records)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            held = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/meminfo", encoding="ascii") as fh:
            free = next(
                int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:")
            )
    except (OSError, ValueError, StopIteration):
        return False
    return free > held


def can_fork() -> bool:
    """Whether worker processes may be forked from this one here and now."""
    return sys.platform.startswith("linux") and _threads() == 1 and _room()


def _run(bounds: tuple[int, int]) -> list[Any]:
    assert _job is not None, "fanout._run outside fan_out"
    return [_job(i) for i in range(*bounds)]


class Pending(Generic[R]):
    """``[job(0), ..., job(n - 1)]`` under way: forked workers (one fewer than the cores)
    start on runs of items from the front at once, while this process goes on with other
    work; :meth:`result` then takes the runs no worker has started, from the back, and
    collects the rest. Where forking is not safe or not worth it (:func:`can_fork`,
    :data:`MIN_ITEMS`), nothing starts early and :meth:`result` does every item here.
    One at a time: a second, started while one is under way, runs here."""

    def __init__(self, job: Callable[[int], R], n: int) -> None:
        global _job
        self.job, self.n = job, n
        self.pool: ProcessPoolExecutor | None = None
        self.bounds: list[tuple[int, int]] = []
        self.futures: list[Future[list[R]]] = []
        cores = min(workers(), -(-n // (MIN_ITEMS // 2)))
        if n < MIN_ITEMS or cores < 2 or _job is not None or not can_fork():
            return
        _job = job
        parts = min(PARTS, n)
        self.bounds = [(k * n // parts, (k + 1) * n // parts) for k in range(parts)]
        import multiprocessing

        self.pool = ProcessPoolExecutor(cores - 1, mp_context=multiprocessing.get_context("fork"))
        self.futures = [self.pool.submit(_run, b) for b in self.bounds]

    def result(self) -> list[R]:
        global _job
        if self.pool is None:
            return [self.job(i) for i in range(self.n)]
        runs: list[list[R] | None] = [None] * len(self.bounds)
        try:
            for k in reversed(range(len(self.bounds))):  # what no worker has started
                if not self.futures[k].cancel():
                    break
                runs[k] = [self.job(i) for i in range(*self.bounds[k])]
            for k, future in enumerate(self.futures):
                if runs[k] is None:
                    try:
                        runs[k] = future.result()
                    except BrokenProcessPool:  # a worker died (killed for memory): here
                        runs[k] = [self.job(i) for i in range(*self.bounds[k])]
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            _job = None
        return [r for run in runs if run is not None for r in run]


def fan_out(job: Callable[[int], R], n: int) -> list[R]:
    """``[job(0), ..., job(n - 1)]``, in order; ``job`` must be a pure function of its
    index whose result pickles (it runs in a forked copy of this process)."""
    return Pending(job, n).result()
