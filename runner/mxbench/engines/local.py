"""``engine: local``: this machine, one fresh ``mxbench bench`` process per cell, no container.

The bench runs with the interpreter running mxbench (or ``python:`` from the host entry), in
its own session so that a Ctrl-C in the terminal reaches only the orchestrator, which then
kills the cell's whole process group (:meth:`LocalEngine.cancel`). A cell past its timeout is
killed the same way, and so is what a bench leaves in its group when it exits. The bench
dies with the orchestrator too (a parent-death signal: ``kill -9`` included); what escaped
both is swept by the next run (:mod:`mxbench.engines.stale`). Its output is untrusted: read
as bytes, the last :data:`~mxbench.engines.base.STDOUT_LIMIT` bytes kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

from mxbench import models
from mxbench.engines import stale
from mxbench.engines.base import (
    PROBE,
    STDERR_LIMIT,
    STDOUT_LIMIT,
    Check,
    Engine,
    EngineUnavailable,
    Outcome,
    Tail,
    probe_check,
    register,
)
from mxbench.engines.cgroup import CgroupUnavailable, MemoryCgroup
from mxbench.engines.cgroup import sweep_stale as cgroup_sweep
from mxbench.engines.compile_cache import CompileCache
from mxbench.errors import UsageError, pip_install
from mxbench.matrix.hosts import LocalHost

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell
    from mxbench.matrix.file import Matrix


@register
class LocalEngine(Engine):
    name: ClassVar[str] = "local"
    host_model = LocalHost
    host: LocalHost

    def __init__(self, host: LocalHost, matrix: Matrix) -> None:
        super().__init__(host, matrix)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._cancelled = False
        self.cache = CompileCache()  # shared by this run's processes on the host

    @property
    def python(self) -> str:
        return self.host.python or sys.executable

    def command(self, cell: Cell) -> list[str]:
        return [self.python, "-m", "mxbench", "bench", *cell.bench_args()]

    def machine(self) -> str:
        return "local"

    def check(self, cells: Sequence[Cell]) -> None:
        """The interpreter exists and can import mxbench and each backend the cells use;
        else exit 2 with the pip line that fixes it (not one error record per cell)."""
        from mxbench.bench.backends import EXTRAS

        python = self.python
        if self.host.python and not shutil.which(python):
            raise UsageError(f"host {self.host.name}: python interpreter {python!r} not found")
        modules = {"mxbench": "tf"} | {b: EXTRAS[b] for b in {c.params.backend for c in cells}}
        for module, extra in modules.items():
            probe = [python, "-c", _FIND_SPEC, module]
            try:
                found = subprocess.run(probe, capture_output=True, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise UsageError(f"host {self.host.name}: cannot run {python!r}: {exc}") from None
            if found.returncode != 0:
                pip = pip_install(extra, python)
                raise UsageError(
                    f"host {self.host.name}: {python} cannot import {module}; install it "
                    f"there with: {pip}"
                )

    def doctor(self, cells: Sequence[Cell]) -> Iterator[Check]:
        try:
            self.check(cells)
        except UsageError as exc:
            yield Check("python", "fail", str(exc).split(";")[0], str(exc).partition("; ")[2])
            return
        backends = sorted({c.params.backend for c in cells}) or ["tensorflow"]
        yield Check("python", "ok", f"{self.python} imports mxbench, {', '.join(backends)}")
        if self.host.memory_limit is not None:
            try:
                MemoryCgroup(self.host.memory_limit, "doctor").remove()
                yield Check("memory_limit", "ok", f"a cgroup v2 limit of {self.host.memory_limit}")
            except CgroupUnavailable as exc:
                yield Check(
                    "memory_limit",
                    "fail",
                    str(exc),
                    "run where cgroup v2 is writable, or drop memory_limit",
                )
        try:
            probe = subprocess.run(
                [self.python, *PROBE], capture_output=True, text=True, timeout=60, check=False
            )
            yield probe_check(probe.stdout, probe.stderr, want_gpus=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            yield Check("devices", "fail", f"the probe did not run: {exc}")

    def prepare(self, cells: Sequence[Cell]) -> None:
        stale.sweep_processes(self.host.name)  # what a run killed with -9 left behind
        cgroup_sweep(self.host.name)
        if self.host.python and not shutil.which(self.host.python):
            raise EngineUnavailable(f"python interpreter {self.host.python!r} not found")
        if self.host.memory_limit is not None:
            try:
                MemoryCgroup(self.host.memory_limit, "check").remove()
            except CgroupUnavailable as exc:
                raise EngineUnavailable(f"memory_limit: {exc}", status="unsupported") from None
        for data in sorted({c.params.data for c in cells} - {"synthetic"}):
            if not os.path.isdir(data):
                raise EngineUnavailable(f"data directory {data!r} does not exist on this host")
        for model in sorted({c.params.model for c in cells}):  # each model once, not per cell
            problem = models.check(model)
            if problem:
                raise EngineUnavailable(problem)

    def run_one(self, cell: Cell) -> Outcome:
        env = {**os.environ, **self.host.env, "PYTHONUNBUFFERED": "1", stale.ENV: stale.owner()}
        env.update(self.cache.env(cell.params.backend, env))
        found = models.source_dir(cell.params.model)
        if found is not None and found[1]:  # a module entry point: its package on the path
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [found[0], env.get("PYTHONPATH")]))
        if self.host.memory_limit is None:
            return self._run(cell, env, None)
        try:
            cgroup = MemoryCgroup(self.host.memory_limit, cell.key)
        except CgroupUnavailable as exc:
            return Outcome(None, status="unsupported", reason=f"memory_limit: {exc}")
        try:
            outcome = self._run(cell, env, cgroup)
            outcome.oom_killed = cgroup.oom_kills() > 0
            outcome.memory_limit = self.host.memory_limit
            outcome.extra["cgroup_peak_bytes"] = cgroup.peak_bytes()
            return outcome
        finally:
            cgroup.remove()

    def _run(self, cell: Cell, env: dict[str, str], cgroup: MemoryCgroup | None) -> Outcome:
        start = time.monotonic()
        if self._cancelled:
            return Outcome(returncode=None, status="error", reason="cancelled")
        # Started outside the lock, so that cancel() never waits on a spawn; a cancel that
        # came meanwhile kills the new group the moment it is known.
        proc = subprocess.Popen(
            self.command(cell),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C goes to us; we decide what the cell gets
            preexec_fn=_child_setup(cgroup),
        )
        self._publish(proc)
        out, err = Tail(STDOUT_LIMIT), Tail(STDERR_LIMIT)
        try:
            timed_out = _collect(proc, out, err, cell.timeout_s)
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        finally:
            with self._lock:
                self._proc = None
        extra: dict[str, object] = {"pid": proc.pid}
        if out.dropped:
            extra["stdout_dropped_bytes"] = out.dropped
        return Outcome(
            returncode=proc.returncode,
            stdout=out.data(),
            stderr=err.data(),
            wall_s=time.monotonic() - start,
            timed_out=timed_out,
            extra=extra,
        )

    def _publish(self, proc: subprocess.Popen[bytes]) -> None:
        """``proc`` is the bench that :meth:`cancel` kills; killed now if a cancel came
        while it was being started."""
        with self._lock:
            self._proc = proc
            if self._cancelled:
                _kill_group(proc)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._proc is not None:
                _kill_group(self._proc)


# Whether the interpreter can import a module, without importing it (TF takes seconds).
_FIND_SPEC = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"


# After the bench exits, how long output still held open by something it started outside
# its process group may keep the cell waiting.
DRAIN_S = 2.0


def _collect(proc: subprocess.Popen[bytes], out: Tail, err: Tail, timeout_s: float) -> bool:
    """Read the bench's stdout and stderr (bounded, :class:`Tail`) until it exits or its
    timeout passes, then kill its process group (what it started dies with the cell) and
    reap it. A pipe held open by a process that left the group costs at most
    :data:`DRAIN_S`. True when the timeout was reached."""
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    timed_out = False
    ended: float | None = None
    with selectors.DefaultSelector() as sel:
        for pipe, sink in ((proc.stdout, out), (proc.stderr, err)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, sink)
        while True:
            now = time.monotonic()
            if ended is None and (_exited(proc) or now >= deadline):
                timed_out = not _exited(proc)
                _kill_group(proc)
                ended = now
            if not sel.get_map() and ended is not None:
                break
            if ended is not None and now - ended > DRAIN_S:
                break
            for key, _ in sel.select(timeout=0.1):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
    proc.stdout.close()
    proc.stderr.close()
    proc.wait()
    return timed_out


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the bench has exited, without reaping it (its pid stays its group's id until
    the group is killed)."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _child_setup(cgroup: MemoryCgroup | None) -> Callable[[], None]:
    """``preexec_fn``: the bench dies with the thread that started it (``kill -9`` of the
    orchestrator included: a parent-death signal), and enters its memory cgroup."""
    prctl = _libc().prctl if sys.platform == "linux" else None

    def setup() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if cgroup is not None:
            cgroup.enter()

    return setup


_PR_SET_PDEATHSIG = 1


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
