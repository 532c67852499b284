"""``engine: local``: this machine, one fresh ``mxbench bench`` process per cell, no container.

The bench runs with the interpreter running mxbench (or ``python:`` from the host entry), in
its own session so that a Ctrl-C in the terminal reaches only the orchestrator, which then
kills the cell's whole process group (:meth:`LocalEngine.cancel`). A cell past its timeout is
killed the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

from mxbench import models
from mxbench.engines.base import (
    PROBE,
    Check,
    Engine,
    EngineUnavailable,
    Outcome,
    probe_check,
    register,
)
from mxbench.engines.cgroup import CgroupUnavailable, MemoryCgroup
from mxbench.errors import UsageError, pip_install
from mxbench.schema import HostBase, OneLine

if TYPE_CHECKING:
    from mxbench.cells import Cell
    from mxbench.matrix import Matrix


class LocalHost(HostBase):
    """This machine, a fresh subprocess per cell, no container (the embedded default)."""

    engine: Literal["local"]
    python: OneLine | None = None  # interpreter with mxbench[tf]; default: the running one


@register
class LocalEngine(Engine):
    name: ClassVar[str] = "local"
    host_model = LocalHost
    host: LocalHost

    def __init__(self, host: LocalHost, matrix: Matrix) -> None:
        super().__init__(host, matrix)
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._cancelled = False

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
                yield Check("memory_limit", "fail", str(exc),
                            "run where cgroup v2 is writable, or drop memory_limit")  # fmt: skip
        try:
            probe = subprocess.run(
                [self.python, *PROBE], capture_output=True, text=True, timeout=60, check=False
            )
            yield probe_check(probe.stdout, probe.stderr, want_gpus=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            yield Check("devices", "fail", f"the probe did not run: {exc}")

    def prepare(self, cells: Sequence[Cell]) -> None:
        if self.host.python and not shutil.which(self.host.python):
            raise EngineUnavailable(f"python interpreter {self.host.python!r} not found")
        if self.host.memory_limit is not None:
            try:
                MemoryCgroup(self.host.memory_limit, "check").remove()
            except CgroupUnavailable as exc:
                raise EngineUnavailable(f"memory_limit: {exc}", status="unsupported") from None
        for cell in cells:
            data = cell.params.data
            if data != "synthetic" and not os.path.isdir(data):
                raise EngineUnavailable(f"data directory {data!r} does not exist on this host")
            problem = models.check(cell.params.model)
            if problem:
                raise EngineUnavailable(problem)

    def run_one(self, cell: Cell) -> Outcome:
        env = {**os.environ, **self.host.env, "PYTHONUNBUFFERED": "1"}
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
        with self._lock:
            if self._cancelled:
                return Outcome(returncode=None, status="error", reason="cancelled")
            proc = subprocess.Popen(
                self.command(cell),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,  # Ctrl-C goes to us; we decide what the cell gets
                preexec_fn=cgroup.enter if cgroup else None,
            )
            self._proc = proc
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=cell.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            stdout, stderr = proc.communicate()
        except BaseException:
            _kill_group(proc)
            proc.communicate()
            raise
        finally:
            with self._lock:
                self._proc = None
        return Outcome(
            returncode=proc.returncode,
            stdout=stdout,
            stderr=stderr,
            wall_s=time.monotonic() - start,
            timed_out=timed_out,
            extra={"pid": proc.pid},
        )

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._proc is not None:
                _kill_group(self._proc)


# Whether the interpreter can import a module, without importing it (TF takes seconds).
_FIND_SPEC = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
