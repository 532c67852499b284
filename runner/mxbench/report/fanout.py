"""Spread a report's work over forked worker processes.

The markdown report of a large fleet is made in parts, one per worker (see
:mod:`mxbench.report.pipeline`). Workers are forked, so they see the parent's state as it
is (copy-on-write, nothing is serialised on the way in); each takes a contiguous run of
the items and sends its results back, pickled, through a pipe. The parent reads them in
order, so the output is the same as a serial ``[fn(x) for x in items]``, and so is any
exception (re-raised in the parent).

Where there is no ``os.fork`` (Windows) or one job is asked for, it simply runs serially.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_JOBS = 8


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def default_jobs() -> int:
    return max(1, min(MAX_JOBS, usable_cpus()))


def fan_out(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R]:
    """``[fn(x) for x in items]``, with the items in ``jobs`` runs on as many workers.

    This process only waits: the work it is given leaves much garbage behind, which a
    worker never frees (it exits), while here it would be freed object by object before
    the results are complete.
    """
    jobs = min(jobs, len(items))
    if jobs <= 1 or not hasattr(os, "fork"):
        return [fn(x) for x in items]
    bounds = [len(items) * i // jobs for i in range(jobs + 1)]
    sys.stdout.flush()
    sys.stderr.flush()
    workers: list[tuple[int, int]] = []  # (pid, read end of its pipe)
    results: list[R] = []
    try:
        for i in range(jobs):
            workers.append(_fork(fn, items[bounds[i] : bounds[i + 1]]))
        while workers:
            pid, fd = workers.pop(0)
            results.extend(_collect(pid, fd))
    finally:
        for pid, fd in workers:  # an error or Ctrl-C here: stop the rest
            _stop(pid, fd)
    return results


def _fork(fn: Callable[[T], R], run: Sequence[T]) -> tuple[int, int]:
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    # The worker: never return into the caller's code, never run its exit handlers.
    status = 0
    try:
        os.close(read)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: the parent reports it
        try:
            payload = pickle.dumps((True, [fn(x) for x in run]), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # sent to the parent, raised there
            try:
                payload = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
            except Exception:
                payload = pickle.dumps((False, RuntimeError(repr(exc))))
        with os.fdopen(write, "wb") as fh:
            fh.write(payload)
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def _collect(pid: int, fd: int) -> list[R]:
    try:
        with os.fdopen(fd, "rb") as fh:
            payload = fh.read()
    finally:  # interrupted: the worker's write fails on the closed pipe, and it exits
        _, status = os.waitpid(pid, 0)
    if not payload:
        raise RuntimeError(f"report worker {pid} died ({_describe(status)}) without a result")
    ok, value = pickle.loads(payload)
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _stop(pid: int, fd: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.close(fd)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
