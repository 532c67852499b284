"""Faults of a Slurm controller, injected at our own seam: an ``scontrol`` wrapper on PATH
that answers as an unreachable controller does, in front of the real one-node cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from conftest import require_service, slurm_up
from test_faults import fake_python, records, wait_for


def test_a_finished_cell_is_kept_while_the_controller_does_not_answer(tmp_path: Path) -> None:
    """The controller stops answering `scontrol show job` once the job is submitted; the
    task's result is on the shared disk, so the cell is ok (not an error 10 minutes later)."""
    require_service(slurm_up(), "a Slurm controller (slurmctld + slurmd + munge)")
    real = shutil.which("scontrol")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "scontrol"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = show ] && [ "$2" = job ]; then\n'
        "  echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\n"
        "  exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    host = f"cut-{uuid.uuid4().hex[:6]}"
    py = fake_python(tmp_path, "print(json.dumps(GOOD))")
    doc = {
        "benchmark": {"image_size": 32, "warmup_steps": 1, "steps": 3, "repeats": 1},
        "axes": {"policy": ["float32"], "batch_size": [4]},
        "hosts": [{"name": host, "engine": "slurm", "python": str(py),
                   "workdir": str(tmp_path / "work")}],
    }  # fmt: skip
    (tmp_path / "matrix.yaml").write_text(json.dumps(doc))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MXBENCH_SLURM_POLL_S": "1"}
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-m", "matrix.yaml", "-r", "results"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert "Unable to contact slurm controller" in res.stderr  # the retries said so
    (rec,) = records(tmp_path, host)
    assert rec["status"] == "ok" and rec["run"]["exit_code"] == 0
    assert took < 120, f"{took:.0f} s"


def test_the_next_run_cancels_the_job_a_killed_run_left(tmp_path: Path) -> None:
    require_service(slurm_up(), "a Slurm controller (slurmctld + slurmd + munge)")
    host = f"left-{uuid.uuid4().hex[:6]}"
    py = fake_python(
        tmp_path,
        """
        if "mixed_float16" not in sys.argv:
            time.sleep(300)
        print(json.dumps(GOOD))
        """,
    )

    def start(policy: str) -> subprocess.Popen[str]:
        doc = {
            "benchmark": {"image_size": 32, "warmup_steps": 1, "steps": 3, "repeats": 1},
            "axes": {"policy": [policy], "batch_size": [4]},
            "hosts": [{"name": host, "engine": "slurm", "python": str(py),
                       "workdir": str(tmp_path / "work")}],
        }  # fmt: skip
        (tmp_path / "matrix.yaml").write_text(json.dumps(doc))
        return subprocess.Popen(
            [sys.executable, "-m", "mxbench", "run", "-m", "matrix.yaml", "-r", "results"],
            cwd=tmp_path, env={**os.environ, "MXBENCH_SLURM_POLL_S": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def jobs() -> list[str]:
        out = subprocess.run(["squeue", "-h", "-n", f"mxbench-{host}", "-o", "%F %T"],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return out.stdout.split()[::2]

    first = start("float32")
    try:
        wait_for(jobs, first)
    finally:
        first.kill()
        first.communicate()
    (left,) = jobs()
    try:
        second = start("mixed_float16")
        _, err = second.communicate(timeout=180)
        assert second.returncode == 0, err
        assert "cancelled stale Slurm jobs (1) left by an earlier run" in err
        deadline = time.monotonic() + 30
        while left in jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left not in jobs()
    finally:
        subprocess.run(["scancel", left], check=False)


def test_a_cancelled_jobs_bench_does_not_outlive_the_job(tmp_path: Path) -> None:
    """A bench that shrugs off Slurm's SIGTERM (a handler in a user's model, a slow exit)
    must still end with its job: cancelled, nothing of it runs seconds later. Without cgroups
    Slurm finds a job's processes by their parents; a job script that died first left such a
    bench reparented to init, out of the job, running on after the job was CANCELLED."""
    require_service(slurm_up(), "a Slurm controller (slurmctld + slurmd + munge)")
    host = f"cancel-{uuid.uuid4().hex[:6]}"
    steps = 700_000 + int(uuid.uuid4().hex[:5], 16) % 100_000  # this test's bench, by pgrep
    py = fake_python(
        tmp_path,
        """
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.1)
        """,
    )
    doc = {
        "benchmark": {"image_size": 32, "warmup_steps": 1, "steps": steps, "repeats": 1},
        "axes": {"policy": ["float32"], "batch_size": [4]},
        "hosts": [{"name": host, "engine": "slurm", "python": str(py),
                   "workdir": str(tmp_path / "work")}],
    }  # fmt: skip
    (tmp_path / "matrix.yaml").write_text(json.dumps(doc))

    def benches() -> list[str]:
        out = subprocess.run(["pgrep", "-af", f"bench.*--steps {steps}( |$)"],
                             capture_output=True, text=True, check=False)  # fmt: skip
        return [line for line in out.stdout.splitlines() if "pgrep" not in line]

    def jobs() -> list[str]:
        out = subprocess.run(["squeue", "-h", "-n", f"mxbench-{host}", "-o", "%F"],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return out.stdout.split()

    run = subprocess.Popen(
        [sys.executable, "-m", "mxbench", "run", "-m", "matrix.yaml", "-r", "results"],
        cwd=tmp_path, env={**os.environ, "MXBENCH_SLURM_POLL_S": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(benches, run, within_s=120)
        (job,) = jobs()
        subprocess.run(["scancel", job], check=True)
        t0 = time.monotonic()
        # Slurm: SIGTERM, then SIGKILL KillWait (5 s here) later
        while (left := benches()) and time.monotonic() - t0 < 30:
            time.sleep(0.2)
        gone_s = time.monotonic() - t0
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
        for pid in (line.split()[0] for line in benches()):  # never leave it to the next test
            subprocess.run(["kill", "-9", pid], check=False)
    print(f"\ncancelled job's bench gone in {gone_s:.1f} s")
    assert left == [], f"the cancelled job's bench outlived it: {left}"
    assert run.returncode == 1, err
    (rec,) = records(tmp_path, host)
    assert rec["status"] == "error" and "CANCELLED" in rec["error"], rec["error"]
