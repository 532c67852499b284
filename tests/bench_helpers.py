"""Running the real ``mxbench bench`` in a fresh process, as the engines do."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import profile_count

# Runs the CLI with the orchestrator's heavy dependencies made unimportable: the bench must
# work in an image that has none of them.
# (Importing one raises ImportError; merely probing for it, as torch._dynamo does for many
# packages at import time, is allowed.) MXBENCH_TEST_BLOCK adds names, e.g. a backend.
_GUARDED_MAIN = """
import importlib.machinery, os, sys
_BLOCKED = {"docker", "pandas", "matplotlib", "yaml"}
_BLOCKED.update(os.environ.get("MXBENCH_TEST_BLOCK", "").split())
class _Refuse:
    def create_module(self, spec):
        raise ImportError(f"mxbench bench imported {spec.name}", name=spec.name)
    def exec_module(self, module):
        pass
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            return importlib.machinery.ModuleSpec(name, _Refuse())
sys.meta_path.insert(0, _Block())
from mxbench.cli import main
sys.argv = ["mxbench", *sys.argv[1:]]
main()
"""

SMALL = ["--image-size", "32", "--batch-size", "8", "--steps", "6", "--warmup-steps", "2"]


@dataclass
class BenchRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def record(self) -> dict[str, Any]:
        """The final record. Stdout holds records only: the measured record once before each
        extra phase it names in ``pending`` (profile, check), then the final one."""
        records = [json.loads(line) for line in self.stdout.splitlines()]
        assert records, f"expected a record on stdout, got:\n{self.stdout}"
        *early, final = records
        assert final.get("pending", []) == [], final.get("pending")
        assert all(r["pending"] for r in early), [r.get("pending") for r in early]
        return final


def run_bench(
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout: float = 300,
) -> BenchRun:
    p = subprocess.run(
        [sys.executable, "-c", _GUARDED_MAIN, "bench", *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=preexec_fn,
        timeout=timeout,
    )
    return BenchRun(p.returncode, p.stdout, p.stderr)


_SHARED: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], BenchRun] = {}


def shared_bench(*args: str, env: dict[str, str] | None = None) -> BenchRun:
    """``run_bench(*args)`` in this process's environment (with ``env`` added: a CPU kind's,
    tests/cpu_kinds.py), once per test session: tests that read the record of the same cell
    share one measurement of it (test_profile's two tests of each kind's cell). Its profiled
    window's raw trace is kept (``record.profile.trace``) for the tests that count it."""
    key = (args, tuple(sorted((env or {}).items())))
    if key not in _SHARED:
        keep = tempfile.mkdtemp(prefix="mxbench-test-trace-")
        atexit.register(shutil.rmtree, keep, True)
        full = {**os.environ, **(env or {}), "MXBENCH_PROFILE_DIR": keep}
        if "jax" in args:  # XLA's own dump of the compiled step, for profile_count's reading
            full["XLA_FLAGS"] = profile_count.xla_dump_flags(keep)
        _SHARED[key] = run_bench(*args, env=full)
    return _SHARED[key]
