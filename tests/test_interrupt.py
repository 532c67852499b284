"""SIGINT stops `mxbench run` within seconds in every phase, however the run was started.

The engine contract (test_engine_contract.py) stops a run while its long cell runs. These
cases stop it where the contract's timing never lands: while it plans and prepares, while a
bench starts, and when the run was started with SIGINT *ignored*, as a background job of a
script, ``nohup`` or a CI runner starts it (exec keeps an ignored signal, and Python then
leaves Ctrl-C ignored: in CI six Ctrl-C cases hung for 90 s, their benches running on).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import long_steps, owned_processes

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow

STOP_S = 15  # how long a test waits for the run to exit after SIGINT
WITHIN_S = 5  # what it must take at most, on a loaded 2-core machine (quiet: 0.1-0.2 s)
REPO = Path(__file__).resolve().parents[1]


# A Docker host nobody answers at: the run retries reaching it (1, 2, 4 s apart).
UNREACHABLE = {
    "images": {"cpu": {"dockerfile": "Dockerfile", "target": "cpu"}},
    "hosts": [{"name": "here", "engine": "docker", "docker_host": "tcp://127.0.0.1:9",
               "images": ["cpu"]}],
}  # fmt: skip


def _matrix(tmp_path: Path, long: int, phase: str) -> Path:
    doc = {
        "benchmark": {"image_size": 32, "warmup_steps": 1, "repeats": 1, "timeout_s": 900},
        "axes": {"policy": ["float32"], "batch_size": [4], "steps": [2, long]},
        "hosts": [{"name": "here", "engine": "local"}],
    }
    if phase == "retrying":
        doc |= UNREACHABLE
    path = tmp_path / "m.yaml"
    path.write_text(json.dumps(doc))
    return path


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Run:
    """`mxbench run` in the background, its stderr read as it comes."""

    def __init__(self, tmp_path: Path, phase: str, ignored: bool) -> None:
        self.long = long_steps()
        self.results = tmp_path / "results"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mxbench", "run", "-m", str(_matrix(tmp_path, self.long, phase)),
             "-r", str(self.results)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            preexec_fn=_ignore_sigint if ignored else None,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT: every thread's stack
        )  # fmt: skip
        self.err: list[str] = []
        assert self.proc.stderr is not None
        stream = self.proc.stderr
        self.reader = threading.Thread(target=lambda: self.err.extend(stream), daemon=True)
        self.reader.start()

    def records(self) -> list[dict]:
        path = self.results / "here.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    def wait_for(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 300
        while not ready():
            assert self.proc.poll() is None, "".join(self.err)[-3000:]
            assert time.monotonic() < deadline, f"never reached: {what}"
            time.sleep(0.05)

    def interrupt(self) -> float:
        """SIGINT, and how long the run took to exit. A run still there after
        :data:`STOP_S` is aborted, and the test fails with where each of its threads was."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            self.reader.join(5)
            err = "".join(self.err)[-8000:]
            pytest.fail(f"no exit {STOP_S} s after SIGINT; its stderr:\n{err}")
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.reader.join(5)
        return time.monotonic() - t0


PHASES: dict[str, Callable[[_Run], bool]] = {
    # planned, preparing the host, starting the first bench: no cell measured yet
    "announced": lambda r: any("cell(s) to run" in line for line in r.err),
    # waiting to try an unreachable Docker daemon again
    "retrying": lambda r: any("retrying in" in line for line in r.err),
    # a bench process of this run exists (importing TensorFlow, warming up, timing)
    "first bench": lambda r: bool(owned_processes(r.proc.pid)),
    # the first cell is saved and the long one runs
    "long cell": lambda r: bool(r.records()) and bool(owned_processes(r.proc.pid, r.long)),
}


@pytest.mark.parametrize(
    ("phase", "ignored"),
    [("announced", False), ("retrying", False), ("first bench", False), ("long cell", True)],
)
def test_sigint_stops_the_run_within_seconds(tmp_path: Path, phase: str, ignored: bool) -> None:
    run = _Run(tmp_path, phase, ignored)
    run.wait_for(phase, lambda: PHASES[phase](run))
    stopped_s = run.interrupt()
    err = "".join(run.err)
    assert run.proc.returncode == 130, err[-3000:]
    assert stopped_s < WITHIN_S, f"{phase}: {stopped_s:.1f} s from SIGINT to exit"
    assert "Traceback" not in err and "--resume" in err, err[-3000:]
    assert all(r["status"] == "ok" for r in run.records())  # a killed cell is not a record
    deadline = time.monotonic() + 10
    while (left := owned_processes(run.proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"left running after the run ended: {left}"
    how = " (SIGINT ignored at start)" if ignored else ""
    print(f"\n{phase}{how}: stopped in {stopped_s:.1f} s")


FAILING_TEST = """
import subprocess, sys, time
from conftest import owned_processes

def test_starts_a_run_then_fails(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "mxbench", "run", "-m", {matrix!r},
                             "-r", str(tmp_path / "r")], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not owned_processes(proc.pid, {long}) and time.monotonic() < deadline:
        time.sleep(0.1)
    print("RUN PID", proc.pid, flush=True)
    assert False, "fails while its run and bench are running"
"""


def test_a_failing_test_leaves_no_run_or_bench_behind(tmp_path: Path, repo_root: Path) -> None:
    """conftest's teardown, seen from outside: a test that fails while its `mxbench run`
    and that run's bench are running (and never stops them) leaves nothing running."""
    long = long_steps()
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        json.dumps(
            {"benchmark": {"image_size": 32, "warmup_steps": 1, "steps": long, "timeout_s": 900},
             "axes": {"policy": ["float32"], "batch_size": [4]},
             "hosts": [{"name": "here", "engine": "local"}]}
        )
    )  # fmt: skip
    inner = tmp_path / "test_inner.py"
    inner.write_text(FAILING_TEST.format(matrix=str(matrix), long=long))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "-p", "conftest", "--rootdir", str(tmp_path), str(inner)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(repo_root / "tests"),
                                                          os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    assert out.returncode == 1 and "1 failed" in out.stdout, out.stdout[-3000:]
    pid = int(out.stdout.split("RUN PID ")[1].split()[0])
    assert owned_processes(pid) == []
    assert "left work running; removed: pid" in out.stdout, out.stdout[-3000:]
