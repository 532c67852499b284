"""Work over many independent items, in worker processes when there are enough of them.

A large report is thousands of sections, each a pure function of its table: built and
rendered one after another they were about half of a 100,000-record report's time
(benchmarks/report_speed.py). :func:`fan_out` hands contiguous runs of them to forked
workers of a :class:`concurrent.futures.ProcessPoolExecutor`; forked workers inherit the
merged records and tables as they stand, so only the results (text) cross back, each
run's in a file of a temporary folder (through the pool's pipe, 64 KiB at a time, a
worker waited on this process's reader, which waited for this process's own work: 10,000
JSON sections took 2.0 s on 2 cores, 1.7 s spooled). This process is one of the workers:
it takes runs from the end while the pool takes them from the start, so a run costs a
forked copy's page faults only where a second core helps (a forked worker did each item
about a third slower than this process, its pages copied on first write: with two forked
workers and this process waiting, 10,000 sections took 0.73 s against 0.89 s in one
process). Short runs (:data:`CHUNKS_PER_WORKER`) keep the two ends even: the pool holds
two runs ahead, which this process cannot take back.

It stays in one process where forking is not safe or not worth it: fewer than
:data:`MIN_ITEMS` items, one usable core, a platform other than Linux, a process that runs
threads already (forking those can deadlock the child: an imported framework's thread
pool, a progress bar's refresher), or less memory free than the process holds. A worker
that dies (the kernel's OOM killer) costs the parallelism, not the report: the items are
then done here.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

R = TypeVar("R")

MIN_ITEMS = 256  # below this, forking costs more than it saves
CHUNKS_PER_WORKER = 32  # runs of items per process: an uneven run does not hold up the rest

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


def _spooled(bounds: tuple[int, int], folder: str) -> str:
    """A worker's run, its results written to a file in ``folder`` (the file's name is what
    crosses back): a pipe holds 64 KiB, so a worker whose results crossed it waited on
    this process's reader, which waited for this process's own runs to yield."""
    results = _run(bounds)
    fd, path = tempfile.mkstemp(dir=folder)
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(results, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _spool() -> tempfile.TemporaryDirectory[str] | None:
    """The folder the workers' results cross back through; None where none can be made (no
    writable temporary folder: the items are then done here)."""
    try:
        return tempfile.TemporaryDirectory(prefix="mxbench-report-")
    except OSError:
        return None


def _unspooled(path: str) -> list[Any]:
    with open(path, "rb") as fh:
        results: list[Any] = pickle.load(fh)
    os.unlink(path)
    return results


def fan_out(
    job: Callable[[int], R], n: int, meanwhile: Callable[[], None] | None = None
) -> list[R]:
    """``[job(0), ..., job(n - 1)]``, in order; ``job`` must be a pure function of its
    index whose result pickles (it runs in a forked copy of this process). ``meanwhile``:
    other work of this process, done while the workers start on the items (before any
    item is done here)."""
    cores = min(workers(), -(-n // (MIN_ITEMS // 2)))
    spool = _spool() if n >= MIN_ITEMS and cores >= 2 and can_fork() else None
    if spool is None:
        if meanwhile is not None:
            meanwhile()
        return [job(i) for i in range(n)]
    global _job
    _job = job
    parts = cores * CHUNKS_PER_WORKER
    bounds = [(k * n // parts, (k + 1) * n // parts) for k in range(parts)]
    done: list[list[Any] | None] = [None] * parts
    try:
        import multiprocessing

        fork = multiprocessing.get_context("fork")
        with spool as folder, ProcessPoolExecutor(cores - 1, mp_context=fork) as pool:
            runs = [pool.submit(_spooled, b, folder) for b in bounds]
            try:
                if meanwhile is not None:
                    meanwhile()
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the runs not started yet, dropped
                raise
            # runs from the end, here, until one is a worker's already (cancel() fails once
            # the pool has handed a run to a worker)
            for k in reversed(range(parts)):
                if not runs[k].cancel():
                    break
                done[k] = _run(bounds[k])
            for k, run in enumerate(runs):
                if done[k] is None:
                    try:
                        done[k] = _unspooled(run.result())
                    except OSError:  # its results could not be written or read (a full
                        done[k] = _run(bounds[k])  # disk): done here
    except BrokenProcessPool:  # a worker died (killed for memory): its runs are done here
        done = [d if d is not None else _run(b) for d, b in zip(done, bounds, strict=True)]
    finally:
        _job = None
    return [r for run in done if run is not None for r in run]
