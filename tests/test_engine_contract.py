"""The engine contract: local, docker and slurm keep the same promises, on the real services.

Each case runs `mxbench run` (the real CLI, the real bench, real TensorFlow) against a
matrix whose only engine-specific part is the host entry (plus the image for docker):

- ok: every cell one complete `ok` record; `--resume` then runs nothing.
- failing bench: an `error` record naming the exit code; the run exits 1.
- timeout: a `timeout` record, exit 1, nothing of the cell left running.
- out of memory: past the host's `memory_limit` the cell is an `oom` record (exit 0: an
  OOM is a valid final result).
- Ctrl-C: exit 130, the finished cell's record kept, no process / container / job left,
  the resume command printed, and `--resume` plans only the unfinished cell.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    BASE_IMAGE,
    long_benches,
    long_steps,
    require_service,
    slurm_up,
    stamped_by_docker,
)

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow


@dataclass
class Rig:
    """One engine, as the contract sees it."""

    engine: str
    home: Path  # the matrix's folder (docker: the build context the image was built from)
    host_fields: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # top-level matrix keys (images)
    env: dict[str, str] = field(default_factory=dict)
    leftovers: Callable[[str], list[str]] = lambda host: []
    image_tag: str = ""  # docker: the tag `mxbench build` gave the cpu image

    def matrix(self, tmp: Path, host: str, benchmark: dict, axes: dict, **fields: Any) -> Path:
        axes = {"policy": ["float32"], "batch_size": [4], **axes}
        bench = {"image_size": 32, "warmup_steps": 1, "steps": 2, "repeats": 1, **benchmark}
        doc = {
            "benchmark": {k: v for k, v in bench.items() if k not in axes},
            "axes": axes,
            **self.extra,
            "hosts": [{"name": host, **self.host_fields, **fields}],
        }
        path = self.home / f"contract-{host}.yaml"
        path.write_text(json.dumps(doc))  # JSON is YAML
        return path

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "mxbench", *args],
            cwd=self.home,
            env={**os.environ, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args)
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _containers(host: str) -> list[str]:
    import docker

    found = docker.from_env().containers.list(
        all=True, sparse=True, filters={"label": f"io.mxbench.host={host}"}
    )
    return [f"container {c.short_id} ({c.status})" for c in found]


def _jobs(host: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-n", f"mxbench-{host}", "-o", "%i %T"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [f"job {line}" for line in out.stdout.splitlines()]


@pytest.fixture(params=["local", "docker", "slurm"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    engine = request.param
    if engine == "local":
        return Rig("local", tmp_path, {"engine": "local"})
    if engine == "docker":
        ctx: Path = request.getfixturevalue("ctx")
        built: dict = request.getfixturevalue("built")
        images = {"cpu": {"dockerfile": "Dockerfile", "target": "cpu",
                          "build_args": {"BASE_IMAGE": BASE_IMAGE}}}  # fmt: skip
        return Rig(
            "docker",
            ctx,
            {"engine": "docker", "images": ["cpu"]},
            extra={"images": images},
            leftovers=_containers,
            image_tag=built["tag"],
        )
    require_service(slurm_up(), "a Slurm controller (slurmctld + slurmd + munge)")
    return Rig(
        "slurm",
        tmp_path,
        {"engine": "slurm", "workdir": str(tmp_path / "work")},
        env={"MXBENCH_SLURM_POLL_S": "1"},
        leftovers=_jobs,
    )


def _host(rig: Rig) -> str:
    return f"{rig.engine}-{uuid.uuid4().hex[:6]}"


def _records(results: Path, host: str) -> list[dict]:
    path = results / f"{host}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _nothing_left(rig: Rig, host: str, steps: int | None, within_s: float = 30) -> None:
    """No bench of ``steps`` steps (this test's own count), container or job of ``host``."""
    deadline = time.monotonic() + within_s
    while True:
        left = (long_benches(steps) if steps else []) + rig.leftovers(host)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == [], f"{rig.engine}: still running after the run ended: {left}"


def test_ok_cells_are_complete_records_and_resume_runs_nothing(rig: Rig, tmp_path: Path) -> None:
    host = _host(rig)
    matrix = rig.matrix(tmp_path, host, {}, {"policy": ["float32", "mixed_bfloat16"]})
    results = tmp_path / "results"
    proc = rig.run("run", "-m", str(matrix), "-r", str(results))
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = _records(results, host)
    assert [r["params"]["policy"] for r in recs] == ["float32", "mixed_bfloat16"]
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert (r["host"], r["engine"]) == (host, rig.engine)
        assert len(r["cell"]) == 16
        step = r["metrics"]["step_ms"]
        assert step["n"] == 2 and len(step["samples"]) == 2 and step["median"] > 0
        assert len(r["metrics"]["losses"]) == 2
        assert r["device"]["kind"] == "cpu" and r["run"]["wall_s"] > 0
        if rig.engine == "docker":  # the image's provenance, stamped by the engine
            stamped_by_docker(r, rig.image_tag, "the local Docker socket")
    assert len({r["cell"] for r in recs}) == 2
    _nothing_left(rig, host, None)

    before = (results / f"{host}.jsonl").read_bytes()
    again = rig.run("run", "-m", str(matrix), "-r", str(results), "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 cell(s) to run" in again.stderr and "2 already done" in again.stderr
    assert (results / f"{host}.jsonl").read_bytes() == before


def test_a_failing_bench_is_an_error_record_naming_its_exit_code(rig: Rig, tmp_path: Path) -> None:
    host = _host(rig)
    # An interpreter that cannot start: the bench process exits 1 before measuring anything.
    matrix = rig.matrix(tmp_path, host, {}, {}, env={"PYTHONHOME": "/nonexistent"})
    results = tmp_path / "results"
    proc = rig.run("run", "-m", str(matrix), "-r", str(results))
    assert proc.returncode == 1, proc.stderr[-3000:]
    [record] = _records(results, host)
    assert record["status"] == "error"
    assert "exit code 1" in record["error"], record["error"]
    assert "1 cell(s) failed" in proc.stderr


def test_a_cell_past_its_time_is_a_timeout_record_and_killed(rig: Rig, tmp_path: Path) -> None:
    host = _host(rig)
    # Slurm enforces whole minutes (checked every 30 s): about 75 s for this one.
    limit = {"time_limit": "1"} if rig.engine == "slurm" else {"timeout_s": 3}
    long = long_steps()
    matrix = rig.matrix(tmp_path, host, {"steps": long}, {}, **limit)
    results = tmp_path / "results"
    t0 = time.monotonic()
    proc = rig.run("run", "-m", str(matrix), "-r", str(results))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert time.monotonic() - t0 < 240
    [record] = _records(results, host)
    assert record["status"] == "timeout", record.get("error")
    _nothing_left(rig, host, long)


def test_a_cell_past_the_memory_limit_is_an_oom_record(rig: Rig, tmp_path: Path) -> None:
    host = _host(rig)
    # Batch 512 at 256 px needs many GiB in float32. Slurm checks memory every 2 s, so its
    # limit is below what TensorFlow's import alone takes: the kill comes early and surely.
    limit = "300m" if rig.engine == "slurm" else "1536m"
    matrix = rig.matrix(
        tmp_path, host, {"image_size": 256, "timeout_s": 600}, {"batch_size": [512]},
        memory_limit=limit,
    )  # fmt: skip
    results = tmp_path / "results"
    proc = rig.run("run", "-m", str(matrix), "-r", str(results))
    assert proc.returncode == 0, proc.stderr[-3000:]  # an OOM is a valid final result
    [record] = _records(results, host)
    assert record["status"] == "oom", record.get("error")
    assert "memory" in record["error"], record["error"]
    if rig.engine != "slurm":  # Slurm words its own memory kill
        assert f"memory_limit of {limit}" in record["error"], record["error"]
        assert record["run"]["memory_limit_bytes"] == 1536 * 2**20
    _nothing_left(rig, host, None)


def test_ctrl_c_keeps_finished_records_and_leaves_nothing_running(rig: Rig, tmp_path: Path) -> None:
    host = _host(rig)
    long = long_steps()
    matrix = rig.matrix(tmp_path, host, {"timeout_s": 900}, {"steps": [2, long]})
    results = tmp_path / "results"
    proc = rig.start("run", "-m", str(matrix), "-r", str(results))
    try:
        deadline = time.monotonic() + 300
        while not (_records(results, host) and long_benches(long)):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the short cell never finished"
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "--resume" in err and "Traceback" not in err
    [record] = _records(results, host)
    assert record["status"] == "ok" and record["params"]["steps"] == 2
    _nothing_left(rig, host, long)

    plan = rig.run("run", "-m", str(matrix), "-r", str(results), "--resume", "--dry-run")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "1 cell(s) already done" in plan.stdout and str(long) in plan.stdout
